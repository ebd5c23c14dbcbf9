{{/* Chart name, truncated to the 63 characters of a DNS label. */}}
{{- define "icebergsync.name" -}}
{{- default .Chart.Name .Values.nameOverride | trunc 63 | trimSuffix "-" }}
{{- end }}

{{/* Full name of the release's objects. */}}
{{- define "icebergsync.fullname" -}}
{{- if .Values.fullnameOverride }}
{{- .Values.fullnameOverride | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- $name := default .Chart.Name .Values.nameOverride }}
{{- if contains $name .Release.Name }}
{{- .Release.Name | trunc 63 | trimSuffix "-" }}
{{- else }}
{{- printf "%s-%s" .Release.Name $name | trunc 63 | trimSuffix "-" }}
{{- end }}
{{- end }}
{{- end }}

{{- define "icebergsync.chart" -}}
{{- printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" | trunc 63 | trimSuffix "-" }}
{{- end }}

{{- define "icebergsync.selectorLabels" -}}
app.kubernetes.io/name: {{ include "icebergsync.name" . }}
app.kubernetes.io/instance: {{ .Release.Name }}
app.kubernetes.io/component: operator
{{- end }}

{{- define "icebergsync.labels" -}}
helm.sh/chart: {{ include "icebergsync.chart" . }}
{{ include "icebergsync.selectorLabels" . }}
app.kubernetes.io/version: {{ .Chart.AppVersion | quote }}
app.kubernetes.io/managed-by: {{ .Release.Service }}
app.kubernetes.io/part-of: icebergsync
{{- end }}

{{- define "icebergsync.serviceAccountName" -}}
{{- if .Values.serviceAccount.create }}
{{- default (include "icebergsync.fullname" .) .Values.serviceAccount.name }}
{{- else }}
{{- required "serviceAccount.name is required when serviceAccount.create is false" .Values.serviceAccount.name }}
{{- end }}
{{- end }}

{{/* The operator's image (tag defaults to the chart's appVersion). */}}
{{- define "icebergsync.image" -}}
{{- printf "%s:%s" .Values.image.repository (default .Chart.AppVersion .Values.image.tag) }}
{{- end }}

{{/* Image of the rendered SparkApplications: sparkImage, else the operator's own image. */}}
{{- define "icebergsync.sparkImage" -}}
{{- default (include "icebergsync.image" .) .Values.sparkImage }}
{{- end }}

{{/* Namespaces that get the Spark driver's ServiceAccount and Role, as a comma-joined list. */}}
{{- define "icebergsync.sparkJobNamespaces" -}}
{{- if .Values.sparkJob.namespaces }}
{{- join "," .Values.sparkJob.namespaces }}
{{- else if .Values.watchNamespaces }}
{{- join "," .Values.watchNamespaces }}
{{- else }}
{{- .Release.Namespace }}
{{- end }}
{{- end }}

{{/* Fail early on value combinations that cannot work. */}}
{{- define "icebergsync.validate" -}}
{{- if and (gt (int .Values.replicaCount) 1) (not .Values.peering.enabled) }}
{{- fail "replicaCount > 1 needs peering.enabled=true: without kopf peering every replica would act" }}
{{- end }}
{{- if not (has .Values.rbac.scope (list "cluster" "namespaced")) }}
{{- fail (printf "rbac.scope must be cluster or namespaced, not %q" .Values.rbac.scope) }}
{{- end }}
{{- if and .Values.rbac.create (eq .Values.rbac.scope "namespaced") (not .Values.watchNamespaces) }}
{{- fail "rbac.scope=namespaced needs watchNamespaces: an operator watching every namespace needs rbac.scope=cluster" }}
{{- end }}
{{- if and .Values.networkPolicy.enabled .Values.networkPolicy.egress.enabled (not .Values.networkPolicy.egress.apiServer) }}
{{- fail "networkPolicy.egress.enabled needs networkPolicy.egress.apiServer: the operator must reach the API server" }}
{{- end }}
{{- end }}

{{- /*
RBAC rules of the operator for namespaced resources (ClusterRole or one Role per watched namespace).
Only the verbs the operator uses (operator/icebergsync_operator/kube.py and kopf itself):
  - icebergsyncs: kopf lists/watches them and patches annotations/finalizers; lifecycle reads one (get).
  - icebergsyncs/status: the operator's status (merge patch).
  - icebergsyncs/finalizers: update, because the SparkApplications/ConfigMaps it creates carry an
    owner reference with blockOwnerDeletion (OwnerReferencesPermissionEnforcement checks this).
  - sparkapplications: kopf lists/watches them (application events); the operator creates and deletes them.
  - configmaps: one immutable spec ConfigMap per sink version: create, get (compare), list (by label), delete.
  - secrets: not here; see secrets-rbac.yaml (namespaced by default).
  - events: create (the operator's and kopf's events on the IcebergSync).
  - kopf peering objects: get/list/watch/patch (kopf), create (the operator ensures they exist).
*/}}
{{- define "icebergsync.namespacedRules" -}}
- apiGroups: ["icebergsync.io"]
  resources: ["icebergsyncs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["icebergsync.io"]
  resources: ["icebergsyncs/status"]
  verbs: ["patch"]
- apiGroups: ["icebergsync.io"]
  resources: ["icebergsyncs/finalizers"]
  verbs: ["update"]
- apiGroups: ["icebergsync.io"]
  resources: ["icebergcatalogs"]
  verbs: ["get", "list", "watch", "patch"]
- apiGroups: ["icebergsync.io"]
  resources: ["icebergcatalogs/status"]
  verbs: ["patch"]
- apiGroups: ["sparkoperator.k8s.io"]
  resources: ["sparkapplications"]
  verbs: ["list", "watch", "create", "delete"]
- apiGroups: [""]
  resources: ["configmaps"]
  verbs: ["get", "list", "create", "delete"]
- apiGroups: [""]
  resources: ["events"]
  verbs: ["create"]
{{- end }}
{{- define "icebergsync.peeringVerbs" -}}
verbs: ["get", "list", "watch", "patch", "create"]
{{- end }}

{{/* Every field naming a Secret, by resource (tests/unit/test_chart.py checks it against the CRDs). */}}
{{- define "icebergsync.secretRefPaths" -}}
icebergsyncs:
- spec.source.files.secretRef
- spec.source.kafka.secretRef
- spec.table.catalog.secretRef
icebergcatalogs:
- spec.secretRef
{{- end }}
