{{/*
Chart name, truncated to 63 characters (a DNS label).
*/}}
{{- define "evictord.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Full name: <release>-<chart>, or the release name alone when it already contains the chart name.
Truncated to 56 characters so that "<fullname>-tls" and similar suffixes stay within 63.
*/}}
{{- define "evictord.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 56 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 56 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{/*
Chart label value: <chart>-<version>.
*/}}
{{- define "evictord.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/*
Labels on every object.
*/}}
{{- define "evictord.labels" -}}
helm.sh/chart: {{ include "evictord.chart" . }}
{{ include "evictord.selectorLabels" . }}
{{- if .Chart.AppVersion }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
{{- end }}
app.kubernetes.io/component: controller
app.kubernetes.io/part-of: evictord
app.kubernetes.io/managed-by: {{ .Release.Service }}
{{- end }}

{{/*
Selector labels (immutable on the Deployment: keep them to name and instance).
*/}}
{{- define "evictord.selectorLabels" -}}
app.kubernetes.io/name: {{ include "evictord.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/*
Name of the ServiceAccount.
*/}}
{{- define "evictord.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "evictord.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
Name of the Secret holding the CA and the serving certificate.
*/}}
{{- define "evictord.tlsSecretName" -}}
{{- default (printf "%s-tls" (include "evictord.fullname" .)) .Values.tls.existingSecret }}
{{- end }}

{{/*
Name of the leader election Lease.
*/}}
{{- define "evictord.leaseName" -}}
{{- printf "%s-leader" (include "evictord.fullname" .) }}
{{- end }}

{{/*
Name of both webhook configurations (validating and mutating), which evictord patches the caBundle of.
*/}}
{{- define "evictord.webhookConfigName" -}}
{{- include "evictord.fullname" . }}
{{- end }}

{{/*
Image reference: repository@digest, or repository:tag (tag defaults to the appVersion).
*/}}
{{- define "evictord.image" -}}
{{- if .Values.image.digest }}
{{- printf "%s@%s" .Values.image.repository .Values.image.digest }}
{{- else }}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}
{{- end }}

{{/*
clientConfig of one webhook; call with (dict "ctx" $ "path" "/validate/...").
Through the Service, or at webhook.url when that is set.
caBundle is left out when evictord patches it in, so that a `helm upgrade` does not wipe the
patched value with an empty one (server-side, an absent field in a three-way merge is kept).
*/}}
{{- define "evictord.webhookClientConfig" -}}
{{- $ctx := .ctx -}}
clientConfig:
  {{- with $ctx.Values.webhook.url }}
  url: {{ printf "%s%s" (trimSuffix "/" .) $.path | quote }}
  {{- else }}
  service:
    name: {{ include "evictord.fullname" $ctx }}
    namespace: {{ $ctx.Release.Namespace }}
    path: {{ .path }}
    port: {{ $ctx.Values.service.port }}
  {{- end }}
  {{- if not $ctx.Values.tls.patchCABundle }}
  {{- $ca := required "tls.caBundle is required when tls.patchCABundle is false" $ctx.Values.tls.caBundle }}
  caBundle: {{ if hasPrefix "-----BEGIN" (trim $ca) }}{{ $ca | b64enc }}{{ else }}{{ $ca | trim }}{{ end }}
  {{- end }}
{{- end }}

{{/*
Whether the pod webhook gets its matchConditions: asked for, and the server is not known to be
older than 1.27 (which has no such field).
*/}}
{{- define "evictord.matchConditions" -}}
{{- if and .Values.webhook.matchConditions.enabled (semverCompare ">=1.27.0-0" .Capabilities.KubeVersion.Version) }}true{{- end }}
{{- end }}

{{/*
Name of the node agent's ServiceAccount: <fullname>-node-agent unless named.
*/}}
{{- define "evictord.nodeAgentServiceAccountName" -}}
{{- if not .Values.nodeAgent.serviceAccount.create }}
{{- required "nodeAgent.serviceAccount.name is required when nodeAgent.serviceAccount.create is false" .Values.nodeAgent.serviceAccount.name }}
{{- else }}
{{- default (printf "%s-node-agent" (include "evictord.fullname" .)) .Values.nodeAgent.serviceAccount.name }}
{{- end }}
{{- end }}

{{/*
apiVersion of FlowSchema and PriorityLevelConfiguration: the newest the server serves, from the
discovered API list (where helm has one: `helm install`, `helm template --api-versions`), else
from the server's version: v1 from 1.29, v1beta3 from 1.26, v1beta2 from 1.23, v1beta1 before
(1.20 serves v1alpha1 and v1beta1). The list is asked for "<group>/<version>/<Kind>": discovery
names kinds, while helm's built-in default list (`helm template` without a cluster) holds every
group/version the helm binary knows, whatever `--kube-version` says.
*/}}
{{- define "evictord.flowcontrolAPIVersion" -}}
{{- $g := "flowcontrol.apiserver.k8s.io" -}}
{{- $has := .Capabilities.APIVersions -}}
{{- $kube := .Capabilities.KubeVersion.Version -}}
{{- if $has.Has (printf "%s/v1/FlowSchema" $g) }}{{ $g }}/v1
{{- else if $has.Has (printf "%s/v1beta3/FlowSchema" $g) }}{{ $g }}/v1beta3
{{- else if $has.Has (printf "%s/v1beta2/FlowSchema" $g) }}{{ $g }}/v1beta2
{{- else if $has.Has (printf "%s/v1beta1/FlowSchema" $g) }}{{ $g }}/v1beta1
{{- else if semverCompare ">=1.29.0-0" $kube }}{{ $g }}/v1
{{- else if semverCompare ">=1.26.0-0" $kube }}{{ $g }}/v1beta3
{{- else if semverCompare ">=1.23.0-0" $kube }}{{ $g }}/v1beta2
{{- else }}{{ $g }}/v1beta1
{{- end }}
{{- end }}
