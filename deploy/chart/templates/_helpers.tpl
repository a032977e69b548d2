{{/* Selects trainset's pods; the kustomize base's only label. */}}
{{- define "trainset.selectorLabels" -}}
app.kubernetes.io/name: trainset
{{- end }}

{{/* Helm's bookkeeping labels on top. */}}
{{- define "trainset.labels" -}}
{{ include "trainset.selectorLabels" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end }}
