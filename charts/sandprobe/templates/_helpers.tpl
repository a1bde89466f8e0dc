{{/* Labels Helm adds to every object's metadata, beside sandprobe's own
(never in selectors or pod templates, so an upgrade changes no selector). */}}
{{- define "sandprobe.labels" -}}
helm.sh/chart: {{ printf "%s-%s" .Chart.Name .Chart.Version | replace "+" "_" }}
app.kubernetes.io/instance: {{ .Release.Name }}
{{- end }}

{{/* The image, REPO[:TAG][@DIGEST]: the runner's and its probe pods'. */}}
{{- define "sandprobe.image" -}}
{{- .Values.image.repository -}}
{{- with .Values.image.tag }}:{{ . }}{{ end -}}
{{- with .Values.image.digest }}@{{ . }}{{ end -}}
{{- end }}

{{/* The policy, parsed (its name and selector feed the admission policy). */}}
{{- define "sandprobe.policy" -}}
{{- $p := fromYaml .Values.policy -}}
{{- if hasKey $p "Error" -}}
{{- fail (printf "values.policy is not YAML: %s" $p.Error) -}}
{{- end -}}
{{- if not (and $p.metadata $p.metadata.name) -}}
{{- fail "values.policy: metadata.name is missing (a SandboxPolicy, see sandprobe validate -f)" -}}
{{- end -}}
{{- toJson $p -}}
{{- end }}

{{/* Whether a Prometheus Operator kind is rendered: true, false, or auto
(on when the cluster serves monitoring.coreos.com/v1). */}}
{{- define "sandprobe.operatorOn" -}}
{{- $v := index . 0 -}}{{- $root := index . 1 -}}
{{- if eq (toString $v) "auto" -}}
{{- if $root.Capabilities.APIVersions.Has "monitoring.coreos.com/v1" }}true{{ end -}}
{{- else if eq (toString $v) "true" }}true{{ end -}}
{{- end }}
