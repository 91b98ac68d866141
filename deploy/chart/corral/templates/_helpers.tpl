{{- define "corral.labels" -}}
app.kubernetes.io/part-of: corral
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector labels of one service's pods: (dict "name" <service>). */}}
{{- define "corral.selector" -}}
app.kubernetes.io/name: corral-{{ .name }}
app.kubernetes.io/component: {{ .name }}
{{- end -}}

{{- define "corral.natsName" -}}
{{ .Release.Name }}-nats
{{- end -}}

{{/*
corral's NATS users, one per component (corral_bus.permissions.USERS; tests/unit/deploy checks
they agree): each has a key of that name in the password Secret.
*/}}
{{- define "corral.natsUsers" -}}
admin watcher engine-upgrade setting-sync im-restart v2-upgrade actuator reader
{{- end -}}

{{/* The Secret of the NATS users' passwords: the one given, else the chart's own. */}}
{{- define "corral.natsSecret" -}}
{{- .Values.nats.auth.existingSecret | default (printf "%s-nats-users" .Release.Name) -}}
{{- end -}}

{{/* Where a pod finds its user's password: the Secret's key <user> mounted as a file. */}}
{{- define "corral.natsPasswordDir" -}}
/var/run/secrets/corral-nats
{{- end -}}

{{/* Where the services reach NATS: the bundled StatefulSet's Service, or the external URL. */}}
{{- define "corral.natsUrl" -}}
{{- if .Values.nats.enabled -}}
nats://{{ include "corral.natsName" . }}.{{ .Values.longhornNamespace }}.svc:4222
{{- else -}}
{{- required "nats.url is required when nats.enabled is false" .Values.nats.url -}}
{{- end -}}
{{- end -}}

{{/* CORRAL_NATS_REPLICAS: the value given, else R3 on the bundled JetStream cluster, else 1. */}}
{{- define "corral.streamReplicas" -}}
{{- if .Values.nats.streamReplicas -}}
{{ .Values.nats.streamReplicas }}
{{- else if and .Values.nats.enabled .Values.nats.cluster.enabled -}}
3
{{- else -}}
1
{{- end -}}
{{- end -}}

{{- define "corral.image" -}}
{{ .Values.image.repository }}:{{ .Values.image.tag }}
{{- end -}}

{{/*
A file of manifests (deploy/rbac/*.yaml, written for longhorn-system) moved into the namespace the
values name: every namespaced object's metadata.namespace and every ServiceAccount subject, so
`--set longhornNamespace=storage` moves ServiceAccounts, Roles and bindings together.
Argument: (dict "root" $ "file" <path under files/>).
*/}}
{{- define "corral.namespacedFile" -}}
{{- $ns := .root.Values.longhornNamespace -}}
{{- $labels := include "corral.labels" .root | fromYaml -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.root.Files.Get .file) -1 }}
{{- $obj := fromYaml $doc -}}
{{- if $obj.kind }}
{{- $meta := $obj.metadata -}}
{{- if $meta.namespace }}{{ $_ := set $meta "namespace" $ns }}{{ end -}}
{{- $_ := set $meta "labels" (merge (default dict $meta.labels) $labels) -}}
{{- range $subject := (default list $obj.subjects) }}
{{- if eq $subject.kind "ServiceAccount" }}{{ $_ := set $subject "namespace" $ns }}{{ end -}}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}
