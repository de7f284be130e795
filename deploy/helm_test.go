package deploy_test

import (
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"testing"

	"helm.sh/helm/v3/pkg/chart"
	"helm.sh/helm/v3/pkg/chart/loader"
	"helm.sh/helm/v3/pkg/chartutil"
	"helm.sh/helm/v3/pkg/engine"
	"helm.sh/helm/v3/pkg/releaseutil"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/json"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

const chartDir = "helm/whilly"

// requiredSecrets are the values the chart refuses to render without (or existingSecret).
var requiredSecrets = map[string]any{"secrets": map[string]any{
	"databaseURL":    "postgres://whilly:pw@db.example.internal:5432/whilly?sslmode=require",
	"bootstrapToken": "0123456789abcdef0123456789abcdef",
}}

// rendered is one release's objects, by kind and name.
type rendered struct {
	objects map[string]runtime.Object // "Kind/name"
	notes   string
}

func (r rendered) kinds() []string {
	return slices.Sorted(maps.Keys(r.objects))
}

func get[T runtime.Object](t *testing.T, r rendered, kind, name string) T {
	t.Helper()
	o, ok := r.objects[kind+"/"+name]
	if !ok {
		t.Fatalf("no %s/%s among %v", kind, name, r.kinds())
	}
	typed, ok := o.(T)
	if !ok {
		t.Fatalf("%s/%s decoded as %T", kind, name, o)
	}
	return typed
}

// strictDecoder decodes YAML into the registered Go types and fails on unknown or
// duplicate fields, as `kubectl apply --validate=strict` does on the server.
func strictDecoder(t *testing.T) runtime.Decoder {
	t.Helper()
	scheme := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(scheme); err != nil {
		t.Fatal(err)
	}
	addKEDA(scheme)
	return json.NewSerializerWithOptions(json.DefaultMetaFactory, scheme, scheme,
		json.SerializerOptions{Yaml: true, Strict: true})
}

func loadChart(t *testing.T) *chart.Chart {
	t.Helper()
	ch, err := loader.Load(chartDir)
	if err != nil {
		t.Fatalf("load the chart: %v", err)
	}
	return ch
}

// minKubeVersion is the least Kubernetes version the chart declares (kubeVersion: ">=X.Y.Z-0").
func minKubeVersion(t *testing.T, ch *chart.Chart) chartutil.KubeVersion {
	t.Helper()
	m := regexp.MustCompile(`^>=\s*v?(\d+)\.(\d+)\.(\d+)(-0)?$`).FindStringSubmatch(ch.Metadata.KubeVersion)
	if m == nil {
		t.Fatalf("chart kubeVersion %q is not a minimum (>=X.Y.Z-0)", ch.Metadata.KubeVersion)
	}
	return chartutil.KubeVersion{Version: "v" + m[1] + "." + m[2] + "." + m[3], Major: m[1], Minor: m[2]}
}

// renderChart does what `helm template whilly deploy/helm/whilly -n ci --kube-version MIN`
// does, at the least Kubernetes version the chart declares, with Helm's own loader and
// engine, and decodes every object strictly.
func renderChart(t *testing.T, release string, values map[string]any) (rendered, error) {
	t.Helper()
	ch := loadChart(t)
	caps := chartutil.DefaultCapabilities.Copy()
	caps.KubeVersion = minKubeVersion(t, ch)
	if !chartutil.IsCompatibleRange(ch.Metadata.KubeVersion, caps.KubeVersion.String()) {
		t.Fatalf("chart kubeVersion %q excludes %s", ch.Metadata.KubeVersion, caps.KubeVersion)
	}
	vals, err := chartutil.ToRenderValues(ch, values,
		chartutil.ReleaseOptions{Name: release, Namespace: "ci", Revision: 1, IsInstall: true}, caps)
	if err != nil {
		return rendered{}, err
	}
	files, err := engine.Render(ch, vals)
	if err != nil {
		return rendered{}, err
	}
	dec := strictDecoder(t)
	out := rendered{objects: map[string]runtime.Object{}}
	for _, name := range slices.Sorted(maps.Keys(files)) {
		body := files[name]
		if strings.HasSuffix(name, "NOTES.txt") {
			out.notes = body
			continue
		}
		for _, doc := range releaseutil.SplitManifests(body) {
			if strings.TrimSpace(doc) == "" {
				continue
			}
			obj, gvk, err := dec.Decode([]byte(doc), nil, nil)
			if err != nil {
				t.Fatalf("%s does not decode strictly: %v\n%s", name, err, doc)
			}
			acc, ok := obj.(interface{ GetName() string })
			if !ok || acc.GetName() == "" {
				t.Fatalf("%s: a %s without a name", name, gvk.Kind)
			}
			key := gvk.Kind + "/" + acc.GetName()
			if _, dup := out.objects[key]; dup {
				t.Fatalf("%s rendered twice", key)
			}
			out.objects[key] = obj
		}
	}
	return out, nil
}

func mustRender(t *testing.T, release string, values map[string]any) rendered {
	t.Helper()
	r, err := renderChart(t, release, values)
	if err != nil {
		t.Fatalf("render: %v", err)
	}
	return r
}

func container(t *testing.T, spec corev1.PodSpec, name string) corev1.Container {
	t.Helper()
	for _, c := range slices.Concat(spec.InitContainers, spec.Containers) {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no container %q", name)
	return corev1.Container{}
}

func envOf(c corev1.Container) map[string]corev1.EnvVar {
	m := map[string]corev1.EnvVar{}
	for _, e := range c.Env {
		m[e.Name] = e
	}
	return m
}

// checkSecretRefs verifies that every secretKeyRef and secret volume points at the
// Secret given, and every non-optional key exists in it (when the chart made it).
func checkSecretRefs(t *testing.T, d *appsv1.Deployment, secretName string, secret *corev1.Secret) {
	t.Helper()
	for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
		for _, e := range c.Env {
			ref := e.ValueFrom
			if ref == nil || ref.SecretKeyRef == nil {
				continue
			}
			if ref.SecretKeyRef.Name != secretName {
				t.Errorf("%s: env %s reads Secret %q, want %q", d.Name, e.Name, ref.SecretKeyRef.Name, secretName)
			}
			if secret != nil && (ref.SecretKeyRef.Optional == nil || !*ref.SecretKeyRef.Optional) {
				if _, ok := secret.StringData[ref.SecretKeyRef.Key]; !ok {
					t.Errorf("%s: env %s needs key %q, which the Secret lacks", d.Name, e.Name, ref.SecretKeyRef.Key)
				}
			}
		}
	}
	for _, v := range d.Spec.Template.Spec.Volumes {
		if v.Secret != nil && v.Secret.SecretName != secretName {
			t.Errorf("%s: volume %s mounts Secret %q, want %q", d.Name, v.Name, v.Secret.SecretName, secretName)
		}
	}
}

// The workers' pods run bubblewrap in a user namespace of their own (hostUsers: false),
// which Kubernetes turns on by default from 1.33 (UserNamespacesSupport beta): the chart
// may not declare an older minimum.
func TestChartDeclaresUserNamespaces(t *testing.T) {
	t.Parallel()
	ch := loadChart(t)
	v := minKubeVersion(t, ch)
	if v.Major != "1" || v.Minor < "33" || len(v.Minor) != 2 {
		t.Errorf("Chart.yaml kubeVersion %q: the workers need Kubernetes >= 1.33 (hostUsers: false)", ch.Metadata.KubeVersion)
	}
	values := readFile(t, chartDir+"/values.yaml")
	r := mustRender(t, "whilly", requiredSecrets)
	for what, text := range map[string]string{"values.yaml": values, "NOTES.txt": r.notes, "Chart.yaml": ch.Metadata.Description} {
		for _, want := range []string{"1.33", "namespace", "Unconfined"} {
			if !strings.Contains(text, want) {
				t.Errorf("%s does not say the workers' requirements (%q)", what, want)
			}
		}
	}
}

// workerPod is the pod template of the release's workers: the ScaledJob's Jobs', or the
// worker Deployment's.
func workerPod(t *testing.T, r rendered, name string) corev1.PodTemplateSpec {
	t.Helper()
	if o, ok := r.objects["ScaledJob/"+name]; ok {
		return o.(*ScaledJob).Spec.JobTargetRef.Template
	}
	return get[*appsv1.Deployment](t, r, "Deployment", name).Spec.Template
}

func TestChartDefaults(t *testing.T) {
	t.Parallel()
	r := mustRender(t, "whilly", requiredSecrets)
	want := []string{"Deployment/whilly-serve", "ScaledJob/whilly-worker",
		"Secret/whilly-secrets", "Service/whilly-serve", "TriggerAuthentication/whilly-worker"}
	if got := r.kinds(); !slices.Equal(got, want) {
		t.Fatalf("objects = %v, want %v", got, want)
	}
	secret := get[*corev1.Secret](t, r, "Secret", "whilly-secrets")
	for _, k := range []string{"database-url", "bootstrap-token", "keda-database-url"} {
		if secret.StringData[k] == "" {
			t.Errorf("Secret lacks %s", k)
		}
	}

	serve := get[*appsv1.Deployment](t, r, "Deployment", "whilly-serve")
	checkSecretRefs(t, serve, "whilly-secrets", secret)
	spec := serve.Spec.Template.Spec
	if serve.Spec.Replicas == nil || *serve.Spec.Replicas != 2 {
		t.Errorf("serve replicas = %v, want 2", serve.Spec.Replicas)
	}
	migrate := container(t, spec, "migrate")
	if !slices.Equal(migrate.Args, []string{"migrate", "up"}) || migrate.Image != serve.Spec.Template.Spec.Containers[0].Image {
		t.Errorf("migrate init container: args %v image %q", migrate.Args, migrate.Image)
	}
	if _, ok := envOf(migrate)["WHILLY_DATABASE_URL"]; !ok {
		t.Error("the migrate init container has no WHILLY_DATABASE_URL")
	}
	c := container(t, spec, "serve")
	if c.Image != "ghcr.io/whilly-go/whilly-serve:"+loadChart(t).Metadata.AppVersion || !slices.Equal(c.Args, []string{"serve"}) {
		t.Errorf("serve container: image %q args %v", c.Image, c.Args)
	}
	if len(c.Ports) != 1 || c.Ports[0].Name != "http" || c.Ports[0].ContainerPort != 8000 {
		t.Errorf("serve ports = %+v", c.Ports)
	}
	if envOf(c)["WHILLY_LISTEN"].Value != "0.0.0.0:8000" {
		t.Errorf("WHILLY_LISTEN = %q, want 0.0.0.0:8000 (the container port)", envOf(c)["WHILLY_LISTEN"].Value)
	}
	// The probes call endpoints the control plane serves without authentication.
	routes := repoFile(t, "control/server.go")
	for probe, want := range map[string]struct {
		p    *corev1.Probe
		path string
	}{"liveness": {c.LivenessProbe, "/healthz"}, "readiness": {c.ReadinessProbe, "/readyz"}, "startup": {c.StartupProbe, "/healthz"}} {
		if want.p == nil || want.p.HTTPGet == nil || want.p.HTTPGet.Path != want.path || want.p.HTTPGet.Port.String() != "http" {
			t.Errorf("%s probe = %+v, want GET %s on port http", probe, want.p, want.path)
			continue
		}
		if !strings.Contains(routes, fmt.Sprintf("r.Get(%q", want.path)) {
			t.Errorf("%s probe: control/server.go routes no GET %s", probe, want.path)
		}
	}
	if sc := c.SecurityContext; sc == nil || sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem ||
		sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation {
		t.Errorf("serve security context = %+v", sc)
	}
	if psc := spec.SecurityContext; psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("serve pod security context = %+v, want runAsNonRoot", psc)
	}

	svc := get[*corev1.Service](t, r, "Service", "whilly-serve")
	if len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].TargetPort.String() != "http" || !maps.Equal(svc.Spec.Selector, serve.Spec.Template.Labels) {
		t.Errorf("service ports %+v selector %v, pods %v", svc.Spec.Ports, svc.Spec.Selector, serve.Spec.Template.Labels)
	}

	// A scale-down never stops an attempt: each Job's worker runs one task and exits.
	sj := get[*ScaledJob](t, r, "ScaledJob", "whilly-worker")
	pod := workerPod(t, r, "whilly-worker")
	checkSecretRefs(t, &appsv1.Deployment{ObjectMeta: sj.ObjectMeta, Spec: appsv1.DeploymentSpec{Template: pod}}, "whilly-secrets", secret)
	wc := container(t, pod.Spec, "worker")
	we := envOf(wc)
	if got := we["WHILLY_CONTROL_URL"].Value; got != "http://whilly-serve.ci.svc:80" {
		t.Errorf("WHILLY_CONTROL_URL = %q", got)
	}
	for _, arg := range []string{"--insecure", "--max-tasks=1", "--drain"} {
		if !slices.Contains(wc.Args, arg) {
			t.Errorf("worker args %v lack %s", wc.Args, arg)
		}
	}
	if pod.Spec.RestartPolicy != corev1.RestartPolicyNever || sj.Spec.JobTargetRef.BackoffLimit == nil || *sj.Spec.JobTargetRef.BackoffLimit != 0 {
		t.Errorf("worker Job: restartPolicy %q backoffLimit %v", pod.Spec.RestartPolicy, deref(sj.Spec.JobTargetRef.BackoffLimit))
	}
	if sj.Spec.ScalingStrategy.Strategy != "accurate" {
		t.Errorf("ScaledJob scaling strategy %q: each Job takes its task off the count, so accurate", sj.Spec.ScalingStrategy.Strategy)
	}
	if _, ok := we["WHILLY_WORKER_TOKEN"]; ok {
		t.Error("workers registered with the bootstrap token should carry no worker token")
	}
	if ref := we["WHILLY_BOOTSTRAP_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "bootstrap-token" {
		t.Error("without secrets.workerBootstrapToken the worker reads the fleet's bootstrap token")
	}
	if ps := pod.Spec.SecurityContext; ps.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined ||
		ps.AppArmorProfile == nil || ps.AppArmorProfile.Type != corev1.AppArmorProfileTypeUnconfined {
		t.Errorf("the bwrap worker's seccomp/AppArmor profiles are %+v", ps)
	}
	if ws := pod.Spec; ws.HostUsers == nil || *ws.HostUsers || wc.SecurityContext == nil ||
		wc.SecurityContext.ProcMount == nil || *wc.SecurityContext.ProcMount != corev1.UnmaskedProcMount {
		t.Errorf("the bwrap worker needs hostUsers: false and procMount: Unmasked")
	}

	if sj.Spec.MinReplicaCount == nil || *sj.Spec.MinReplicaCount != 0 {
		t.Errorf("minReplicaCount = %v, want 0 (scale to zero)", deref(sj.Spec.MinReplicaCount))
	}
	if sj.Spec.MaxReplicaCount == nil || *sj.Spec.MaxReplicaCount < 1 {
		t.Errorf("maxReplicaCount = %v", deref(sj.Spec.MaxReplicaCount))
	}
	if len(sj.Spec.Triggers) != 1 || sj.Spec.Triggers[0].Type != "postgresql" {
		t.Fatalf("triggers = %+v, want one postgresql trigger", sj.Spec.Triggers)
	}
	tr := sj.Spec.Triggers[0]
	checkTriggerMetadata(t, tr)
	checkQuery(t, tr.Metadata["query"], "ARRAY[]::text[] AS labels, ARRAY[]::text[] AS scopes, false AS running, '' AS pods")
	if tr.Metadata["activationTargetQueryValue"] != "0" || tr.Metadata["targetQueryValue"] != "1" {
		t.Errorf("trigger metadata %v", tr.Metadata)
	}
	ta := get[*TriggerAuthentication](t, r, "TriggerAuthentication", "whilly-worker")
	if tr.AuthenticationRef == nil || tr.AuthenticationRef.Name != ta.Name {
		t.Errorf("the trigger's authenticationRef %+v is not %s", tr.AuthenticationRef, ta.Name)
	}
	// KEDA's libpq gets a URL of its own (it refuses pgx's parameters).
	if len(ta.Spec.SecretTargetRef) != 1 || ta.Spec.SecretTargetRef[0] != (AuthSecretTargetRef{
		Parameter: "connection", Name: "whilly-secrets", Key: "keda-database-url"}) {
		t.Errorf("TriggerAuthentication secretTargetRef = %+v", ta.Spec.SecretTargetRef)
	}
	worker := &appsv1.Deployment{Spec: appsv1.DeploymentSpec{Template: pod}}

	var names []string
	for _, d := range []*appsv1.Deployment{serve, worker} {
		for _, c := range slices.Concat(d.Spec.Template.Spec.InitContainers, d.Spec.Template.Spec.Containers) {
			for _, e := range c.Env {
				names = append(names, e.Name)
			}
		}
	}
	if bad := unknownVariables(t, names); len(bad) > 0 {
		t.Errorf("the chart sets variables whilly does not read: %v", bad)
	}
	if !strings.Contains(r.notes, "port-forward svc/whilly-serve") || !strings.Contains(r.notes, "whilly admin token mint --owner k8s --bootstrap --scope") {
		t.Errorf("NOTES.txt:\n%s", r.notes)
	}
}

// allowedTriggerMetadata are the metadata keys KEDA's postgresql and prometheus scalers
// read (pkg/scalers/postgresql_scaler.go and prometheus_scaler.go of KEDA v2.21): a
// misspelt key would be ignored by KEDA without a word.
var allowedTriggerMetadata = map[string][]string{
	"postgresql": {"query", "targetQueryValue", "activationTargetQueryValue", "connectionFromEnv", "host", "port",
		"userName", "dbName", "sslmode", "passwordFromEnv"},
	"prometheus": {"serverAddress", "query", "queryParameters", "threshold", "activationThreshold", "namespace",
		"customHeaders", "ignoreNullValues", "unsafeSsl", "timeout"},
}

func checkTriggerMetadata(t *testing.T, tr ScaleTriggers) {
	t.Helper()
	allowed, ok := allowedTriggerMetadata[tr.Type]
	if !ok {
		t.Fatalf("trigger type %q", tr.Type)
	}
	for k := range tr.Metadata {
		if !slices.Contains(allowed, k) {
			t.Errorf("%s trigger: KEDA reads no metadata key %q", tr.Type, k)
		}
	}
}

// checkQuery verifies that a KEDA query is files/ready-tasks.sql with its parameters
// (its first line) set to params; a test of the queue package runs the file against the
// schema.
func checkQuery(t *testing.T, query, params string) {
	t.Helper()
	file := strings.TrimSpace(readFile(t, chartDir+"/files/ready-tasks.sql"))
	first, rest, _ := strings.Cut(file, "\n")
	if want := "WITH chart AS (SELECT " + params + ")\n" + rest; query != want {
		t.Errorf("the trigger's query is not files/ready-tasks.sql with %s:\n%s\nfirst line of the file: %s", params, query, first)
	}
	if !strings.Contains(query, "NOT EXISTS (SELECT 1 FROM fleet WHERE paused)") {
		t.Errorf("the KEDA query ignores the fleet's pause:\n%s", query)
	}
}

// deref prints a pointer's value, or nil.
func deref[T any](p *T) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestChartCustomValues(t *testing.T) {
	t.Parallel()
	const pem = "-----BEGIN RSA PRIVATE KEY-----\nMIIB\n-----END RSA PRIVATE KEY-----\n"
	r := mustRender(t, "prod-whilly-eu", map[string]any{
		"image": map[string]any{"serve": map[string]any{"repository": "registry.example.com/whilly/serve", "tag": "v1.2.3"}},
		"secrets": map[string]any{
			"databaseURL": "postgres://u:p@db:5432/whilly", "bootstrapToken": "tok",
			"githubAppPrivateKey": pem, "githubWebhookSecret": "hook", "metricsToken": "m", "agentAPIKey": "sk",
			"tokenSealKey": "a-seal-key-of-thirty-two-bytes-or-more",
		},
		"serve": map[string]any{
			"replicas": 3, "publicURL": "https://whilly.example.com",
			"github":   map[string]any{"appID": "12345"},
			"extraEnv": []any{map[string]any{"name": "WHILLY_LEASE_TTL", "value": "90s"}},
		},
		"worker": map[string]any{
			"controlURL": "https://whilly.example.com", "labels": "gpu,linux", "agent": "codex",
			"agentAPIKeyEnv": "OPENAI_API_KEY",
			"autoscaling":    map[string]any{"kind": "ScaledObject", "trigger": "prometheus", "maxReplicas": 25, "tasksPerWorker": 2},
		},
	})
	if _, ok := r.objects["TriggerAuthentication/prod-whilly-eu"]; ok {
		t.Error("a prometheus trigger needs no TriggerAuthentication")
	}
	secret := get[*corev1.Secret](t, r, "Secret", "prod-whilly-eu-secrets")
	if secret.StringData["github-app-private-key"] != pem {
		t.Error("the App key did not reach the Secret verbatim")
	}
	serve := get[*appsv1.Deployment](t, r, "Deployment", "prod-whilly-eu-serve")
	checkSecretRefs(t, serve, "prod-whilly-eu-secrets", secret)
	c := container(t, serve.Spec.Template.Spec, "serve")
	env := envOf(c)
	if c.Image != "registry.example.com/whilly/serve:v1.2.3" || *serve.Spec.Replicas != 3 {
		t.Errorf("image %q replicas %d", c.Image, *serve.Spec.Replicas)
	}
	for name, want := range map[string]string{"WHILLY_GITHUB_APP_ID": "12345", "WHILLY_PUBLIC_URL": "https://whilly.example.com",
		"WHILLY_GITHUB_PRIVATE_KEY_FILE": "/etc/whilly/github/private-key.pem", "WHILLY_LEASE_TTL": "90s"} {
		if env[name].Value != want {
			t.Errorf("%s = %q, want %q", name, env[name].Value, want)
		}
	}
	if ref := env["WHILLY_GITHUB_WEBHOOK_SECRET"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "github-webhook-secret" {
		t.Error("the webhook secret does not come from the Secret")
	}
	// Every replica seals push tokens with the one key of the Secret.
	if ref := env["WHILLY_TOKEN_SEAL_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "token-seal-key" || secret.StringData["token-seal-key"] == "" {
		t.Error("the push token seal key does not come from the Secret")
	}
	var mounted bool
	for _, m := range c.VolumeMounts {
		mounted = mounted || (m.MountPath == "/etc/whilly/github" && m.ReadOnly)
	}
	if !mounted {
		t.Error("the App key is not mounted read-only at /etc/whilly/github")
	}

	worker := get[*appsv1.Deployment](t, r, "Deployment", "prod-whilly-eu-worker")
	wc := container(t, worker.Spec.Template.Spec, "worker")
	if slices.Contains(wc.Args, "--insecure") || !slices.Contains(wc.Args, "--labels=gpu,linux") {
		t.Errorf("worker args %v: https needs no --insecure; labels are passed", wc.Args)
	}
	if ref := envOf(wc)["OPENAI_API_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "agent-api-key" {
		t.Error("the agent's key does not come from the Secret under OPENAI_API_KEY")
	}
	so := get[*ScaledObject](t, r, "ScaledObject", "prod-whilly-eu-worker")
	tr := so.Spec.Triggers[0]
	checkTriggerMetadata(t, tr)
	if tr.Type != "prometheus" || tr.Metadata["query"] != "sum(whilly_ready_tasks)" || tr.Metadata["threshold"] != "2" ||
		*so.Spec.MaxReplicaCount != 25 || *so.Spec.MinReplicaCount != 0 {
		t.Errorf("prometheus ScaledObject: %+v, min %v max %v", tr, deref(so.Spec.MinReplicaCount), deref(so.Spec.MaxReplicaCount))
	}

	// An existing Secret and no autoscaling: the chart makes no Secret, no ScaledObject,
	// and gives the worker Deployment a fixed count.
	r = mustRender(t, "whilly", map[string]any{
		"secrets": map[string]any{"existingSecret": "ops-whilly"},
		"worker":  map[string]any{"replicas": 4, "sandbox": "none", "autoscaling": map[string]any{"enabled": false}},
	})
	if got := r.kinds(); !slices.Equal(got, []string{"Deployment/whilly-serve", "Deployment/whilly-worker", "Service/whilly-serve"}) {
		t.Errorf("objects = %v", got)
	}
	worker = get[*appsv1.Deployment](t, r, "Deployment", "whilly-worker")
	checkSecretRefs(t, worker, "ops-whilly", nil)
	checkSecretRefs(t, get[*appsv1.Deployment](t, r, "Deployment", "whilly-serve"), "ops-whilly", nil)
	if worker.Spec.Replicas == nil || *worker.Spec.Replicas != 4 || worker.Spec.Template.Spec.HostUsers != nil {
		t.Errorf("worker replicas %v hostUsers %v", worker.Spec.Replicas, worker.Spec.Template.Spec.HostUsers)
	}
	// Without bubblewrap the worker gets the runtime's default profiles back.
	psc, sc := worker.Spec.Template.Spec.SecurityContext, worker.Spec.Template.Spec.Containers[0].SecurityContext
	if psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault || psc.AppArmorProfile.Type != corev1.AppArmorProfileTypeRuntimeDefault ||
		sc.ProcMount != nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot {
		t.Errorf("worker without sandbox: pod %+v container %+v", psc, sc)
	}
}

func TestChartRefusesIncompleteValues(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name   string
		values map[string]any
		want   string
	}{
		{"no database URL", map[string]any{}, "secrets.databaseURL is required"},
		{"no bootstrap token", map[string]any{"secrets": map[string]any{"databaseURL": "postgres://db/whilly"}},
			"secrets.bootstrapToken is required"},
		{"App id without its key", map[string]any{"secrets": requiredSecrets["secrets"], "serve": map[string]any{"github": map[string]any{"appID": "1"}}},
			"set secrets.githubAppPrivateKey, secrets.githubWebhookSecret and secrets.tokenSealKey"},
		{"unknown trigger", map[string]any{"secrets": requiredSecrets["secrets"], "worker": map[string]any{"autoscaling": map[string]any{"trigger": "cpu"}}},
			`worker.autoscaling.trigger is "cpu"`},
		{"unknown kind", map[string]any{"secrets": requiredSecrets["secrets"], "worker": map[string]any{"autoscaling": map[string]any{"kind": "HPA"}}},
			`worker.autoscaling.kind is "HPA"`},
		{"pgx parameters for KEDA", map[string]any{"secrets": map[string]any{"databaseURL": "postgres://db/whilly?pool_max_conns=20", "bootstrapToken": "t"}},
			"set secrets.kedaDatabaseURL"},
		{"scopes without a scoped token", map[string]any{"secrets": requiredSecrets["secrets"], "worker": map[string]any{"scopes": []any{"repo:acme/shop"}}},
			"set secrets.workerBootstrapToken"},
		{"ingress without a host", map[string]any{"secrets": requiredSecrets["secrets"], "ingress": map[string]any{"enabled": true}},
			"ingress.host is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := renderChart(t, "whilly", tt.values)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("render error = %v, want one saying %q", err, tt.want)
			}
		})
	}
}

// The decoder really is strict: a misspelt field fails (guards the test itself).
func TestStrictDecoderRefusesUnknownFields(t *testing.T) {
	t.Parallel()
	doc := "apiVersion: keda.sh/v1alpha1\nkind: ScaledObject\nmetadata: {name: x}\nspec:\n  scaleTargetRef: {name: w}\n  minReplicas: 0\n"
	if _, _, err := strictDecoder(t).Decode([]byte(doc), nil, nil); err == nil || !strings.Contains(err.Error(), "minReplicas") {
		t.Errorf("decoding a ScaledObject with spec.minReplicas: %v, want an unknown-field error", err)
	}
	var gvk *schema.GroupVersionKind
	if _, gvk, _ = strictDecoder(t).Decode([]byte("apiVersion: v1\nkind: Service\nmetadata: {name: s}\n"), nil, nil); gvk == nil || gvk.Kind != "Service" {
		t.Errorf("a plain Service decoded as %v", gvk)
	}
}

// Workers register with a scoped bootstrap token, and KEDA counts only the tasks they
// may claim: their labels, their scopes, and (a Deployment) the tasks its own pods run.
func TestChartScopedWorkers(t *testing.T) {
	t.Parallel()
	values := func(kind string) map[string]any {
		return map[string]any{
			"secrets": map[string]any{"databaseURL": "postgres://whilly@db/whilly?pool_max_conns=20", "bootstrapToken": "fleet",
				"workerBootstrapToken": "scoped", "kedaDatabaseURL": "postgres://keda@db/whilly"},
			"worker": map[string]any{"labels": "gpu,linux", "scopes": []any{"repo:acme/shop", "installation:42"},
				"autoscaling": map[string]any{"kind": kind}},
		}
	}
	r := mustRender(t, "whilly", values("ScaledJob"))
	secret := get[*corev1.Secret](t, r, "Secret", "whilly-secrets")
	if secret.StringData["worker-bootstrap-token"] != "scoped" || secret.StringData["keda-database-url"] != "postgres://keda@db/whilly" {
		t.Errorf("Secret = %v", secret.StringData)
	}
	wc := container(t, workerPod(t, r, "whilly-worker").Spec, "worker")
	if ref := envOf(wc)["WHILLY_BOOTSTRAP_TOKEN"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "worker-bootstrap-token" {
		t.Errorf("the worker does not register with the scoped token: %+v", ref)
	}
	sj := get[*ScaledJob](t, r, "ScaledJob", "whilly-worker")
	checkQuery(t, sj.Spec.Triggers[0].Metadata["query"],
		"ARRAY['gpu', 'linux']::text[] AS labels, ARRAY['repo:acme/shop', 'installation:42']::text[] AS scopes, false AS running, '' AS pods")

	r = mustRender(t, "whilly", values("ScaledObject"))
	so := get[*ScaledObject](t, r, "ScaledObject", "whilly-worker")
	checkQuery(t, so.Spec.Triggers[0].Metadata["query"],
		"ARRAY['gpu', 'linux']::text[] AS labels, ARRAY['repo:acme/shop', 'installation:42']::text[] AS scopes, true AS running, 'whilly-worker-' AS pods")
	d := get[*appsv1.Deployment](t, r, "Deployment", "whilly-worker")
	if d.Spec.Replicas != nil || slices.Contains(d.Spec.Template.Spec.Containers[0].Args, "--drain") {
		t.Errorf("worker Deployment: replicas %v args %v", deref(d.Spec.Replicas), d.Spec.Template.Spec.Containers[0].Args)
	}
	if ref := so.Spec.ScaleTargetRef; ref == nil || ref.Name != d.Name || ref.Kind != "Deployment" {
		t.Errorf("ScaledObject targets %+v", so.Spec.ScaleTargetRef)
	}
}

// Pull mode, approval and allowed owners are values; the planner and TRIZ box the agent
// in serve's pod, which then gets the worker's exemptions; an Ingress reaches serve.
func TestChartServeValues(t *testing.T) {
	t.Parallel()
	r := mustRender(t, "whilly", requiredSecrets)
	serve := get[*appsv1.Deployment](t, r, "Deployment", "whilly-serve")
	if ps := serve.Spec.Template.Spec; ps.HostUsers != nil || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("serve without planner: hostUsers %v, seccomp %v", ps.HostUsers, ps.SecurityContext.SeccompProfile)
	}
	if _, ok := r.objects["Ingress/whilly-serve"]; ok {
		t.Error("an Ingress by default")
	}

	r = mustRender(t, "whilly", map[string]any{
		"secrets": requiredSecrets["secrets"],
		"serve": map[string]any{"planner": "claude", "triz": true, "publicURL": "https://whilly.example.com",
			"github": map[string]any{"deliveries": "pull", "allowedOwners": "acme,octo", "requireApproval": true}},
		"ingress": map[string]any{"enabled": true, "className": "nginx", "host": "whilly.example.com",
			"tls": []any{map[string]any{"secretName": "whilly-tls", "hosts": []any{"whilly.example.com"}}}},
	})
	serve = get[*appsv1.Deployment](t, r, "Deployment", "whilly-serve")
	c := container(t, serve.Spec.Template.Spec, "serve")
	env := envOf(c)
	for name, want := range map[string]string{"WHILLY_GITHUB_DELIVERIES": "pull", "WHILLY_GITHUB_ALLOWED_OWNERS": "acme,octo",
		"WHILLY_REQUIRE_APPROVAL": "1", "WHILLY_PLANNER": "claude", "WHILLY_TRIZ_ENABLED": "1", "WHILLY_SANDBOX": "bwrap"} {
		if env[name].Value != want {
			t.Errorf("serve %s = %q, want %q", name, env[name].Value, want)
		}
	}
	if ref := env["ANTHROPIC_API_KEY"].ValueFrom; ref == nil || ref.SecretKeyRef.Key != "agent-api-key" {
		t.Error("the planner's agent gets no API key")
	}
	ps := serve.Spec.Template.Spec
	if ps.HostUsers == nil || *ps.HostUsers || ps.SecurityContext.SeccompProfile.Type != corev1.SeccompProfileTypeUnconfined ||
		c.SecurityContext.ProcMount == nil || *c.SecurityContext.ProcMount != corev1.UnmaskedProcMount ||
		ps.SecurityContext.RunAsNonRoot == nil || !*ps.SecurityContext.RunAsNonRoot {
		t.Errorf("serve with the planner: pod %+v container %+v, want the bubblewrap exemptions", ps.SecurityContext, c.SecurityContext)
	}
	if m := container(t, ps, "migrate"); m.SecurityContext.ProcMount != nil {
		t.Error("the migrate init container runs no agent: no exemptions")
	}
	ing := get[*networkingv1.Ingress](t, r, "Ingress", "whilly-serve")
	if len(ing.Spec.Rules) != 1 || ing.Spec.Rules[0].Host != "whilly.example.com" || ing.Spec.IngressClassName == nil || *ing.Spec.IngressClassName != "nginx" ||
		len(ing.Spec.TLS) != 1 || ing.Spec.TLS[0].SecretName != "whilly-tls" {
		t.Fatalf("Ingress spec = %+v", ing.Spec)
	}
	be := ing.Spec.Rules[0].HTTP.Paths[0].Backend.Service
	svc := get[*corev1.Service](t, r, "Service", "whilly-serve")
	if be == nil || be.Name != svc.Name || be.Port.Name != svc.Spec.Ports[0].Name {
		t.Errorf("the Ingress's backend %+v is not the Service %s port %s", be, svc.Name, svc.Spec.Ports[0].Name)
	}
}
