{{/* Names and labels shared by the templates. */}}

{{- define "whilly.fullname" -}}
{{- if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 50 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 50 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{- define "whilly.labels" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
{{- end -}}

{{- define "whilly.selector" -}}
app.kubernetes.io/name: {{ .Chart.Name }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end -}}

{{- define "whilly.secretName" -}}
{{- .Values.secrets.existingSecret | default (printf "%s-secrets" (include "whilly.fullname" .)) -}}
{{- end -}}

{{- define "whilly.image" -}}
{{- printf "%s:%s" .image.repository (.image.tag | default .root.Chart.AppVersion) -}}
{{- end -}}

{{- define "whilly.controlURL" -}}
{{- .Values.worker.controlURL | default (printf "http://%s-serve.%s.svc:%v" (include "whilly.fullname" .) .Release.Namespace .Values.service.port) -}}
{{- end -}}

{{/* secretEnv renders an env entry from a key of the chart's Secret; optional keys may be absent. */}}
{{- define "whilly.secretEnv" -}}
- name: {{ .name }}
  valueFrom:
    secretKeyRef:
      name: {{ include "whilly.secretName" .root }}
      key: {{ .key }}
      optional: {{ .optional }}
{{- end -}}
