{{/*
whilly.workerPod is the worker's pod template (metadata and spec), the same for the
Deployment and the ScaledJob's Jobs. Arguments: root (the chart's context) and job (a
Job's pod: it runs one task, or stops when nothing it may claim is left, and exits).
*/}}
{{- define "whilly.workerPod" -}}
{{- $root := .root }}
{{- $v := $root.Values.worker }}
{{- $keys := $root.Values.secretKeys }}
{{- $url := include "whilly.controlURL" $root }}
{{- $boxed := eq $v.sandbox "bwrap" }}
{{- $bootKey := $keys.bootstrapToken }}
{{- if or $root.Values.secrets.workerBootstrapToken (and $root.Values.secrets.existingSecret $v.scopes) }}
{{- $bootKey = $keys.workerBootstrapToken }}
{{- else if $v.scopes }}
{{- fail "worker.scopes is set: set secrets.workerBootstrapToken to a bootstrap token minted with those scopes (whilly admin token mint --bootstrap --scope …)" }}
{{- end }}
metadata:
  labels:
    {{- include "whilly.selector" $root | nindent 4 }}
    app.kubernetes.io/component: worker
spec:
  {{- with $root.Values.imagePullSecrets }}
  imagePullSecrets:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  automountServiceAccountToken: false
  terminationGracePeriodSeconds: {{ $v.terminationGracePeriodSeconds }}
  {{- if .job }}
  restartPolicy: Never
  {{- end }}
  {{- include "whilly.sandboxSpec" (dict "root" $root "boxed" $boxed "podSecurityContext" $v.podSecurityContext) | nindent 2 }}
  containers:
    - name: worker
      image: {{ include "whilly.image" (dict "image" $root.Values.image.worker "root" $root) }}
      imagePullPolicy: {{ $root.Values.image.pullPolicy }}
      {{- $insecure := and (hasPrefix "http://" $url) (contains ".svc" $url) }}
      {{- if or $insecure $v.labels .job }}
      args:
        {{- if $insecure }}
        - --insecure
        {{- end }}
        {{- with $v.labels }}
        - --labels={{ . }}
        {{- end }}
        {{- if .job }}
        - --max-tasks=1
        - --drain
        {{- end }}
      {{- end }}
      env:
        - name: WHILLY_CONTROL_URL
          value: {{ $url | quote }}
        # No worker token: each pod registers itself with the bootstrap token (scoped:
        # secrets.workerBootstrapToken) and revokes its token when it exits.
        {{- include "whilly.secretEnv" (dict "root" $root "name" "WHILLY_BOOTSTRAP_TOKEN" "key" $bootKey "optional" false) | nindent 8 }}
        {{- include "whilly.secretEnv" (dict "root" $root "name" $v.agentAPIKeyEnv "key" $keys.agentAPIKey "optional" true) | nindent 8 }}
        - name: WHILLY_AGENT
          value: {{ $v.agent | quote }}
        - name: WHILLY_SANDBOX
          value: {{ $v.sandbox | quote }}
        - name: WHILLY_WORKSPACE_DIR
          value: /var/lib/whilly/workspaces
        {{- with $v.model }}
        - name: WHILLY_MODEL
          value: {{ . | quote }}
        {{- end }}
        {{- with $v.plan }}
        - name: WHILLY_PLAN
          value: {{ . | quote }}
        {{- end }}
        {{- with $v.extraEnv }}
        {{- toYaml . | nindent 8 }}
        {{- end }}
      securityContext:
        {{- include "whilly.sandboxContainer" (dict "root" $root "boxed" $boxed "securityContext" $v.securityContext) | nindent 8 }}
      resources:
        {{- toYaml $v.resources | nindent 8 }}
      volumeMounts:
        - {name: workspaces, mountPath: /var/lib/whilly}
        - {name: tmp, mountPath: /tmp}
  volumes:
    - name: workspaces
      emptyDir:
        sizeLimit: {{ $v.workspaceSizeLimit }}
    - {name: tmp, emptyDir: {}}
  {{- with $v.nodeSelector }}
  nodeSelector:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.tolerations }}
  tolerations:
    {{- toYaml . | nindent 4 }}
  {{- end }}
  {{- with $v.affinity }}
  affinity:
    {{- toYaml . | nindent 4 }}
  {{- end }}
{{- end -}}

{{/*
whilly.sandboxSpec renders hostUsers and the pod's securityContext of a pod that runs
bubblewrap (boxed) or not: sandboxSecurity's settings merged over podSecurityContext.
*/}}
{{- define "whilly.sandboxSpec" -}}
{{- $psc := deepCopy .podSecurityContext }}
{{- if .boxed }}
{{- $psc = mustMergeOverwrite $psc (deepCopy .root.Values.sandboxSecurity.podSecurityContext) }}
hostUsers: {{ .root.Values.sandboxSecurity.hostUsers }}
{{- end }}
securityContext:
  {{- toYaml $psc | nindent 2 }}
{{- end -}}

{{/* whilly.sandboxContainer renders a container's securityContext, boxed or not. */}}
{{- define "whilly.sandboxContainer" -}}
{{- $sc := deepCopy .securityContext }}
{{- if .boxed }}
{{- $sc = mustMergeOverwrite $sc (deepCopy .root.Values.sandboxSecurity.securityContext) }}
{{- end }}
{{- toYaml $sc }}
{{- end -}}
