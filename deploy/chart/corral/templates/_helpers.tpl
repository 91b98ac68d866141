{{- define "corral.labels" -}}
app.kubernetes.io/part-of: corral
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end -}}
