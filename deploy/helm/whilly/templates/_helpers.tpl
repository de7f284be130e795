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

{{/* sqlArray renders a list of strings as a Postgres text[] literal. */}}
{{- define "whilly.sqlArray" -}}
{{- $items := list }}
{{- range . }}{{ $items = append $items (printf "'%s'" (replace "'" "''" (toString .))) }}{{ end }}
{{- printf "ARRAY[%s]::text[]" (join ", " $items) -}}
{{- end -}}

{{/*
whilly.kedaQuery is files/ready-tasks.sql for this release's workers: its first line's
parameters replaced by their labels, their scopes, and, for a Deployment (running), the
prefix of its pods' names, with which they register (the tasks they run are counted too).
*/}}
{{- define "whilly.kedaQuery" -}}
{{- $v := .root.Values.worker }}
{{- $pods := "" }}
{{- if .running }}{{ $pods = printf "%s-worker-" (include "whilly.fullname" .root) }}{{ end }}
{{- $params := printf "WITH chart AS (SELECT %s AS labels, %s AS scopes, %s AS running, '%s' AS pods)"
    (include "whilly.sqlArray" (splitList "," $v.labels | compact))
    (include "whilly.sqlArray" $v.scopes) (ternary "true" "false" .running) $pods }}
{{- $sql := .root.Files.Get "files/ready-tasks.sql" | trim }}
{{- $first := index (splitList "\n" $sql) 0 }}
{{- if not (hasPrefix "WITH chart AS" $first) }}{{ fail "files/ready-tasks.sql must begin with its WITH chart AS line" }}{{ end }}
{{- replace $first $params $sql -}}
{{- end -}}
