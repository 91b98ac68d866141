{{/*
The prefix of every name the chart gives: the release name (`corral` for a release called corral,
so `corral-watcher`), `<release>-corral` when the release name does not say corral, or
`fullnameOverride`. Two releases never share a name, and corral's own objects all go to the
release's namespace; only the grants on Longhorn's objects go to `longhornNamespace`.
*/}}
{{- define "corral.fullname" -}}
{{- if .Values.fullnameOverride -}}
{{- .Values.fullnameOverride | trunc 40 | trimSuffix "-" -}}
{{- else if contains .Chart.Name .Release.Name -}}
{{- .Release.Name | trunc 40 | trimSuffix "-" -}}
{{- else -}}
{{- printf "%s-%s" .Release.Name .Chart.Name | trunc 40 | trimSuffix "-" -}}
{{- end -}}
{{- end -}}

{{/* A component's name: (dict "root" $ "name" <component>) → <fullname>-<component>. */}}
{{- define "corral.componentName" -}}
{{ include "corral.fullname" .root }}-{{ .name }}
{{- end -}}

{{- define "corral.labels" -}}
app.kubernetes.io/part-of: corral
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version }}
{{- end -}}

{{/* The selector labels of one component's pods: (dict "root" $ "name" <component>). The release
is part of them, so two releases in one namespace never select each other's pods. */}}
{{- define "corral.selector" -}}
app.kubernetes.io/name: corral-{{ .name }}
app.kubernetes.io/component: {{ .name }}
app.kubernetes.io/instance: {{ .root.Release.Name }}
{{- end -}}

{{- define "corral.natsName" -}}
{{ include "corral.fullname" . }}-nats
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
{{- .Values.nats.auth.existingSecret | default (printf "%s-nats-users" (include "corral.fullname" .)) -}}
{{- end -}}

{{/* TLS to the bundled NATS: the Secret holding tls.crt, tls.key and ca.crt ("" when off). */}}
{{- define "corral.natsTlsSecret" -}}
{{- $tls := .Values.nats.tls -}}
{{- if and .Values.nats.enabled $tls.enabled -}}
{{- if $tls.certManager.enabled -}}
{{ include "corral.natsName" . }}-tls
{{- else -}}
{{- required "nats.tls.existingSecret (a Secret with tls.crt, tls.key and ca.crt) or nats.tls.certManager.enabled is required with nats.tls.enabled" $tls.existingSecret -}}
{{- end -}}
{{- end -}}
{{- end -}}

{{/* Where a client finds the CA that signed NATS's certificate. */}}
{{- define "corral.natsCaDir" -}}
/etc/corral/nats-ca
{{- end -}}

{{/* A client container's TLS environment and its volume mount / pod volume (empty when TLS is off). */}}
{{- define "corral.natsTlsEnv" -}}
{{- if include "corral.natsTlsSecret" . }}
- {name: CORRAL_NATS_TLS_CA, value: {{ printf "%s/ca.crt" (include "corral.natsCaDir" .) | quote }}}
{{- end }}
{{- end -}}
{{- define "corral.natsTlsMount" -}}
{{- if include "corral.natsTlsSecret" . }}
- {name: nats-ca, mountPath: {{ include "corral.natsCaDir" . }}, readOnly: true}
{{- end }}
{{- end -}}
{{- define "corral.natsTlsVolume" -}}
{{- with include "corral.natsTlsSecret" . }}
- name: nats-ca
  secret:
    secretName: {{ . }}
    items:
      - {key: ca.crt, path: ca.crt}
{{- end }}
{{- end -}}

{{/* Where a pod finds its user's password: the Secret's key <user> mounted as a file. */}}
{{- define "corral.natsPasswordDir" -}}
/var/run/secrets/corral-nats
{{- end -}}

{{/* Where the services reach NATS: the bundled StatefulSet's Service, or the external URL. */}}
{{- define "corral.natsUrl" -}}
{{- if .Values.nats.enabled -}}
nats://{{ include "corral.natsName" . }}.{{ .Release.Namespace }}.svc:4222
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
A file of manifests (deploy/rbac/*.yaml, written for a release `corral` in longhorn-system) fitted
to this release: every `corral-` name (objects, roleRefs, subjects) takes the release's prefix,
ServiceAccounts go to the release's namespace, and Roles and RoleBindings, which grant on
Longhorn's objects, to `longhornNamespace`, their ServiceAccount subjects pointing back.
Argument: (dict "root" $ "file" <path under files/>).
*/}}
{{- define "corral.namespacedFile" -}}
{{- $lh := .root.Values.longhornNamespace -}}
{{- $own := .root.Release.Namespace -}}
{{- $prefix := printf "%s-" (include "corral.fullname" .root) -}}
{{- $labels := include "corral.labels" .root | fromYaml -}}
{{- range $doc := regexSplit "(?m)^---\\s*$" (.root.Files.Get .file) -1 }}
{{- $obj := fromYaml $doc -}}
{{- if $obj.kind }}
{{- $meta := $obj.metadata -}}
{{- $_ := set $meta "name" (regexReplaceAll "^corral-" $meta.name $prefix) -}}
{{- if $meta.namespace }}{{ $_ := set $meta "namespace" (ternary $lh $own (has $obj.kind (list "Role" "RoleBinding"))) }}{{ end -}}
{{- $_ := set $meta "labels" (merge (default dict $meta.labels) $labels) -}}
{{- with $obj.roleRef }}{{ $_ := set . "name" (regexReplaceAll "^corral-" .name $prefix) }}{{ end -}}
{{- range $subject := (default list $obj.subjects) }}
{{- if eq $subject.kind "ServiceAccount" }}
{{- $_ := set $subject "namespace" $own -}}
{{- $_ := set $subject "name" (regexReplaceAll "^corral-" $subject.name $prefix) -}}
{{- end -}}
{{- end }}
---
{{ toYaml $obj }}
{{- end }}
{{- end }}
{{- end -}}
