package deploy_test

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"go.yaml.in/yaml/v3"

	"github.com/hopgate/hopgate/dispatch/config"
)

// The tests run in deploy/ (go test sets the working directory to the
// package directory); every path below is relative to it.
const (
	composeDir  = "compose"
	k8sDir      = "k8s"
	jaegerDir   = "jaeger"
	composeFile = "compose/docker-compose.yaml"
)

// ---------------------------------------------------------------- helpers

// decodeAll decodes every document of a (possibly multi-document) YAML file
// into generic maps; empty documents (a lone "---") are dropped.
func decodeAll(t *testing.T, file string) []map[string]any {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	dec := yaml.NewDecoder(bytes.NewReader(data))
	var docs []map[string]any
	for i := 0; ; i++ {
		var doc map[string]any
		err := dec.Decode(&doc)
		if errors.Is(err, io.EOF) {
			return docs
		}
		if err != nil {
			t.Fatalf("%s: document %d: %v", file, i, err)
		}
		if doc != nil {
			docs = append(docs, doc)
		}
	}
}

// decodeOne decodes a single-document YAML file.
func decodeOne(t *testing.T, file string) map[string]any {
	t.Helper()
	docs := decodeAll(t, file)
	if len(docs) != 1 {
		t.Fatalf("%s: want 1 YAML document, got %d", file, len(docs))
	}
	return docs[0]
}

// get walks a decoded YAML/JSON tree along keys (map keys, or list indexes
// written as numbers are not needed here) and returns nil when any step is
// missing.
func get(v any, keys ...string) any {
	for _, k := range keys {
		m, ok := v.(map[string]any)
		if !ok {
			return nil
		}
		v = m[k]
	}
	return v
}

func str(v any, keys ...string) string {
	s, _ := get(v, keys...).(string)
	return s
}

func list(v any, keys ...string) []any {
	l, _ := get(v, keys...).([]any)
	return l
}

func mapping(v any, keys ...string) map[string]any {
	m, _ := get(v, keys...).(map[string]any)
	return m
}

func num(v any, keys ...string) (int, bool) {
	n, ok := get(v, keys...).(int)
	return n, ok
}

// anyEnv answers every api_key_env lookup, so shipped configs load without
// real credentials.
func anyEnv(string) (string, bool) { return "placeholder", true }

// ---------------------------------------------------------------- all files

// Every YAML file under deploy/ must parse, multi-document files included: a
// tab or a bad indent would otherwise surface only at `docker compose up` or
// `kubectl apply` time.
func TestEveryYAMLParses(t *testing.T) {
	var files []string
	err := filepath.WalkDir(".", func(p string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if ext := filepath.Ext(p); !d.IsDir() && (ext == ".yaml" || ext == ".yml") {
			files = append(files, p)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(files) < 10 {
		t.Fatalf("found only %d YAML files under deploy/: %v", len(files), files)
	}
	for _, f := range files {
		t.Run(f, func(t *testing.T) {
			if docs := decodeAll(t, f); len(docs) == 0 {
				t.Errorf("%s holds no YAML document", f)
			}
		})
	}
}

// The hopgate configs shipped for compose and Kubernetes must load with the
// gateway's own strict loader (what `hopgate check` runs), not merely parse.
func TestShippedHopgateConfigsLoad(t *testing.T) {
	k8sConfig := str(k8sObject(t, "ConfigMap", "hopgate-config"), "data", "hopgate.yaml")
	composeConfig, err := os.ReadFile(filepath.Join(composeDir, "hopgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for name, data := range map[string][]byte{
		"compose/hopgate.yaml":            composeConfig,
		"k8s/configmap.yaml hopgate.yaml": []byte(k8sConfig),
	} {
		if _, err := config.Parse(data, anyEnv); err != nil {
			t.Errorf("%s does not load:\n%v", name, err)
		}
	}
}

// ---------------------------------------------------------------- kubernetes

type k8sObj = map[string]any

// k8sObjects loads every manifest of deploy/k8s (the example Secret included).
func k8sObjects(t *testing.T) []k8sObj {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var objs []k8sObj
	for _, f := range files {
		if filepath.Base(f) == "kustomization.yaml" {
			continue
		}
		objs = append(objs, decodeAll(t, f)...)
	}
	return objs
}

func k8sObject(t *testing.T, kind, name string) k8sObj {
	t.Helper()
	for _, o := range k8sObjects(t) {
		if str(o, "kind") == kind && str(o, "metadata", "name") == name {
			return o
		}
	}
	t.Fatalf("deploy/k8s has no %s named %q", kind, name)
	return nil
}

// selects reports whether a label selector (matchLabels or a Service's plain
// selector map) selects the given labels.
func selects(selector, labels map[string]any) bool {
	if len(selector) == 0 {
		return false
	}
	for k, v := range selector {
		if labels[k] != v {
			return false
		}
	}
	return true
}

// hopgateContainer returns the Deployment's pod template and its hopgate container.
func hopgateContainer(t *testing.T) (pod, container map[string]any) {
	t.Helper()
	dep := k8sObject(t, "Deployment", "hopgate")
	pod = mapping(dep, "spec", "template")
	for _, c := range list(pod, "spec", "containers") {
		if str(c, "name") == "hopgate" {
			return pod, c.(map[string]any)
		}
	}
	t.Fatal("Deployment hopgate has no container named hopgate")
	return nil, nil
}

// The Deployment carries what a gateway that drains streams and holds
// credentials needs; each case names the setting and why it matters.
func TestDeployment(t *testing.T) {
	dep := k8sObject(t, "Deployment", "hopgate")
	pod, c := hopgateContainer(t)
	podSpec := mapping(pod, "spec")
	sc := mapping(c, "securityContext")

	adminPort := 0
	for _, p := range list(c, "ports") {
		if str(p, "name") == "admin" {
			adminPort, _ = num(p, "containerPort")
		}
	}

	// The admin port the probes use must be the one hopgate listens on.
	cfg, err := config.Parse([]byte(str(k8sObject(t, "ConfigMap", "hopgate-config"), "data", "hopgate.yaml")), anyEnv)
	if err != nil {
		t.Fatalf("ConfigMap config does not load: %v", err)
	}

	replicas, _ := num(dep, "spec", "replicas")
	grace, _ := num(podSpec, "terminationGracePeriodSeconds")
	envNames := map[string]map[string]any{}
	for _, e := range list(c, "env") {
		envNames[str(e, "name")] = e.(map[string]any)
	}

	checks := []struct {
		name string
		ok   bool
	}{
		// Two replicas so the PDB (minAvailable 1) can let a node drain.
		{"replicas >= 2", replicas >= 2},
		// hopgate drains for up to 30 s; SIGKILL must not cut the drain.
		{"terminationGracePeriodSeconds >= 45", grace >= 45},
		// Probes on the admin listener, so client load cannot starve them.
		{"liveness on admin /healthz", str(c, "livenessProbe", "httpGet", "path") == "/healthz" && str(c, "livenessProbe", "httpGet", "port") == "admin"},
		{"readiness on admin /readyz", str(c, "readinessProbe", "httpGet", "path") == "/readyz" && str(c, "readinessProbe", "httpGet", "port") == "admin"},
		{"container port named admin", adminPort != 0},
		{"admin port matches admin_listen", adminPort != 0 && strings.HasSuffix(cfg.AdminListen, ":"+strconv.Itoa(adminPort))},
		{"pod runAsNonRoot", get(podSpec, "securityContext", "runAsNonRoot") == true},
		{"pod seccomp RuntimeDefault", str(podSpec, "securityContext", "seccompProfile", "type") == "RuntimeDefault"},
		{"container runAsNonRoot", get(sc, "runAsNonRoot") == true},
		{"readOnlyRootFilesystem", get(sc, "readOnlyRootFilesystem") == true},
		{"allowPrivilegeEscalation false", get(sc, "allowPrivilegeEscalation") == false},
		{"capabilities drop ALL", slices.Contains(list(sc, "capabilities", "drop"), any("ALL"))},
		{"container seccomp RuntimeDefault", str(sc, "seccompProfile", "type") == "RuntimeDefault"},
		// The HPA computes CPU utilisation against the request.
		{"cpu and memory requests", get(c, "resources", "requests", "cpu") != nil && get(c, "resources", "requests", "memory") != nil},
		{"memory limit", get(c, "resources", "limits", "memory") != nil},
		{"OTEL_EXPORTER_OTLP_ENDPOINT set", str(envNames["OTEL_EXPORTER_OTLP_ENDPOINT"], "value") != ""},
		{"OTEL_SERVICE_NAME set", str(envNames["OTEL_SERVICE_NAME"], "value") != ""},
	}
	for _, ck := range checks {
		if !ck.ok {
			t.Errorf("Deployment: %s: not satisfied", ck.name)
		}
	}

	// Every api_key_env of the config comes from the Secret, under the same
	// key the example Secret documents.
	secret := k8sObject(t, "Secret", "hopgate-channel-keys")
	for _, ch := range cfg.Channels {
		if ch.APIKeyEnv == "" {
			continue
		}
		e := envNames[ch.APIKeyEnv]
		if e == nil {
			t.Errorf("channel %s: env %s not set in the Deployment", ch.ID, ch.APIKeyEnv)
			continue
		}
		ref := mapping(e, "valueFrom", "secretKeyRef")
		if str(ref, "name") != "hopgate-channel-keys" || str(ref, "key") == "" {
			t.Errorf("channel %s: env %s does not come from Secret hopgate-channel-keys", ch.ID, ch.APIKeyEnv)
		}
		if str(e, "value") != "" {
			t.Errorf("channel %s: env %s has a literal value in the Deployment", ch.ID, ch.APIKeyEnv)
		}
		if _, ok := mapping(secret, "stringData")[str(ref, "key")]; !ok {
			t.Errorf("secret.example.yaml lacks key %s", str(ref, "key"))
		}
	}
	for k, v := range mapping(secret, "stringData") {
		if v != "REPLACE_ME" {
			t.Errorf("secret.example.yaml: %s must be the placeholder REPLACE_ME, not a value", k)
		}
	}

	// The config file the container is told to read is the mounted ConfigMap.
	args := strings.Join(toStrings(list(c, "args")), " ")
	mounted := false
	for _, m := range list(c, "volumeMounts") {
		if strings.Contains(args, str(m, "mountPath")+"/hopgate.yaml") {
			mounted = true
		}
	}
	if !mounted {
		t.Errorf("Deployment args %q read a config that no volumeMount provides", args)
	}
}

// The admin listener is reachable only through its own ClusterIP Service,
// and the ServiceMonitor scrapes that Service by port name.
func TestServicesAndServiceMonitor(t *testing.T) {
	pod, _ := hopgateContainer(t)
	podLabels := mapping(pod, "metadata", "labels")

	var services []k8sObj
	for _, o := range k8sObjects(t) {
		if str(o, "kind") == "Service" {
			services = append(services, o)
		}
	}
	var admin k8sObj
	for _, s := range services {
		if !selects(mapping(s, "spec", "selector"), podLabels) {
			t.Errorf("Service %s selects no hopgate pod", str(s, "metadata", "name"))
		}
		for _, p := range list(s, "spec", "ports") {
			if str(p, "targetPort") != "admin" && str(p, "name") != "admin" {
				continue
			}
			if admin != nil {
				t.Errorf("admin port exposed by more than one Service")
			}
			admin = s
		}
	}
	if admin == nil {
		t.Fatal("no Service exposes the admin port")
	}
	if typ := str(admin, "spec", "type"); typ != "" && typ != "ClusterIP" {
		t.Errorf("admin Service type %s: must stay ClusterIP (admin is never exposed outside the cluster)", typ)
	}
	for _, p := range list(admin, "spec", "ports") {
		if str(p, "targetPort") != "admin" {
			t.Errorf("admin Service %s also exposes port %v", str(admin, "metadata", "name"), get(p, "name"))
		}
	}

	sm := k8sObject(t, "ServiceMonitor", "hopgate")
	if str(sm, "apiVersion") != "monitoring.coreos.com/v1" {
		t.Errorf("ServiceMonitor apiVersion %q", str(sm, "apiVersion"))
	}
	if !selects(mapping(sm, "spec", "selector", "matchLabels"), mapping(admin, "metadata", "labels")) {
		t.Errorf("ServiceMonitor selector does not select Service %s", str(admin, "metadata", "name"))
	}
	for _, s := range services {
		if str(s, "metadata", "name") != str(admin, "metadata", "name") && selects(mapping(sm, "spec", "selector", "matchLabels"), mapping(s, "metadata", "labels")) {
			t.Errorf("ServiceMonitor also selects Service %s", str(s, "metadata", "name"))
		}
	}
	adminPortNames := map[string]bool{}
	for _, p := range list(admin, "spec", "ports") {
		adminPortNames[str(p, "name")] = true
	}
	eps := list(sm, "spec", "endpoints")
	if len(eps) == 0 {
		t.Fatal("ServiceMonitor has no endpoints")
	}
	for _, ep := range eps {
		if !adminPortNames[str(ep, "port")] {
			t.Errorf("ServiceMonitor endpoint port %q is not a port name of Service %s", str(ep, "port"), str(admin, "metadata", "name"))
		}
		if str(ep, "path") != "/metrics" {
			t.Errorf("ServiceMonitor endpoint path %q, want /metrics", str(ep, "path"))
		}
	}
}

// PDB and HPA exist, target the gateway, and agree with each other.
func TestDisruptionBudgetAndAutoscaler(t *testing.T) {
	pod, _ := hopgateContainer(t)
	podLabels := mapping(pod, "metadata", "labels")

	pdb := k8sObject(t, "PodDisruptionBudget", "hopgate")
	if min, _ := num(pdb, "spec", "minAvailable"); min != 1 {
		t.Errorf("PDB minAvailable = %v, want 1", get(pdb, "spec", "minAvailable"))
	}
	if !selects(mapping(pdb, "spec", "selector", "matchLabels"), podLabels) {
		t.Error("PDB selects no hopgate pod")
	}

	hpa := k8sObject(t, "HorizontalPodAutoscaler", "hopgate")
	if v := str(hpa, "apiVersion"); v != "autoscaling/v2" {
		t.Errorf("HPA apiVersion %q, want autoscaling/v2", v)
	}
	if str(hpa, "spec", "scaleTargetRef", "kind") != "Deployment" || str(hpa, "spec", "scaleTargetRef", "name") != "hopgate" {
		t.Error("HPA does not target Deployment hopgate")
	}
	// A floor of 1 would let the HPA undo what the PDB protects.
	if min, _ := num(hpa, "spec", "minReplicas"); min < 2 {
		t.Errorf("HPA minReplicas %d, want >= 2", min)
	}
	cpu := false
	for _, m := range list(hpa, "spec", "metrics") {
		if str(m, "type") == "Resource" && str(m, "resource", "name") == "cpu" {
			cpu = true
		}
	}
	if !cpu {
		t.Error("HPA has no CPU resource metric")
	}
}

// `kubectl apply -k` applies every manifest but never the placeholder Secret.
func TestKustomization(t *testing.T) {
	k := decodeOne(t, filepath.Join(k8sDir, "kustomization.yaml"))
	res := toStrings(list(k, "resources"))
	if slices.Contains(res, "secret.example.yaml") {
		t.Error("kustomization applies secret.example.yaml: it would overwrite a real Secret with placeholders")
	}
	files, _ := filepath.Glob(filepath.Join(k8sDir, "*.yaml"))
	for _, f := range files {
		b := filepath.Base(f)
		if b == "kustomization.yaml" || b == "secret.example.yaml" {
			continue
		}
		if !slices.Contains(res, b) {
			t.Errorf("kustomization does not list %s", b)
		}
	}
	for _, r := range res {
		if _, err := os.Stat(filepath.Join(k8sDir, r)); err != nil {
			t.Errorf("kustomization resource %s: %v", r, err)
		}
	}
}

// ---------------------------------------------------------------- compose

type mount struct{ host, container string }

// composeService returns a service of the compose file.
func composeService(t *testing.T, name string) map[string]any {
	t.Helper()
	s := mapping(decodeOne(t, composeFile), "services", name)
	if s == nil {
		t.Fatalf("compose has no service %q", name)
	}
	return s
}

// bindMounts returns a service's bind mounts (short syntax), host paths
// resolved against the compose file's directory as docker compose does.
func bindMounts(svc map[string]any) []mount {
	var ms []mount
	for _, v := range list(svc, "volumes") {
		s, ok := v.(string)
		if !ok {
			continue
		}
		parts := strings.Split(s, ":")
		if len(parts) < 2 || !(strings.HasPrefix(parts[0], ".") || strings.HasPrefix(parts[0], "/")) {
			continue // named volume
		}
		ms = append(ms, mount{host: filepath.Join(composeDir, parts[0]), container: parts[1]})
	}
	return ms
}

// hostPath maps a container path to the host path through the service's bind
// mounts, or "" when no mount covers it.
func hostPath(ms []mount, p string) string {
	for _, m := range ms {
		if p == m.container {
			return m.host
		}
		if rel, ok := strings.CutPrefix(p, m.container+"/"); ok {
			return filepath.Join(m.host, filepath.FromSlash(rel))
		}
	}
	return ""
}

// Every bind mount and build input of the compose stack exists in the repo,
// and every image is pinned (a floating tag makes the collector allow-list
// and the configs drift from what actually runs).
func TestComposeFilesExistAndImagesPinned(t *testing.T) {
	doc := decodeOne(t, composeFile)
	services := mapping(doc, "services")
	for _, want := range []string{"hopgate", "fake-eu", "fake-us", "otel-collector", "jaeger", "tempo", "prometheus", "grafana"} {
		if services[want] == nil {
			t.Errorf("compose lacks service %s", want)
		}
	}
	for name, s := range services {
		for _, m := range bindMounts(s.(map[string]any)) {
			if _, err := os.Stat(m.host); err != nil {
				t.Errorf("service %s mounts %s: %v", name, m.host, err)
			}
		}
		if b := mapping(s, "build"); b != nil {
			ctx := filepath.Join(composeDir, str(b, "context"))
			if _, err := os.Stat(filepath.Join(ctx, str(b, "dockerfile"))); err != nil {
				t.Errorf("service %s: dockerfile: %v", name, err)
			}
			continue
		}
		img := str(s, "image")
		_, tag, ok := strings.Cut(path.Base(img), ":")
		if !ok || tag == "" || tag == "latest" {
			t.Errorf("service %s: image %q is not pinned to a version", name, img)
		}
	}
	// Exemplars link hop latency to traces only with exemplar storage on.
	if !slices.Contains(toStrings(list(services["prometheus"], "command")), "--enable-feature=exemplar-storage") {
		t.Error("compose prometheus runs without --enable-feature=exemplar-storage")
	}
}

// promtool must accept the Prometheus config. Without promtool the test is
// skipped on a workstation but fails in CI, where deploy/prometheus/install.sh
// runs first.
func TestPromtoolCheckConfig(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	if err != nil {
		if os.Getenv("CI") == "true" {
			t.Fatal("promtool not found in CI: run deploy/prometheus/install.sh first")
		}
		t.Skip("promtool not installed (deploy/prometheus/install.sh installs it)")
	}
	out, err := exec.Command(promtool, "check", "config", filepath.Join(composeDir, "prometheus.yml")).CombinedOutput()
	if err != nil {
		t.Fatalf("promtool check config: %v\n%s", err, out)
	}
	// The scrape target is hopgate's admin listener, as configured for compose.
	cfg, err := os.ReadFile(filepath.Join(composeDir, "hopgate.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	c, err := config.Parse(cfg, anyEnv)
	if err != nil {
		t.Fatal(err)
	}
	_, port, _ := strings.Cut(c.AdminListen, ":")
	prom := decodeOne(t, filepath.Join(composeDir, "prometheus.yml"))
	found := false
	for _, sc := range list(prom, "scrape_configs") {
		for _, st := range list(sc, "static_configs") {
			if slices.Contains(toStrings(list(st, "targets")), "hopgate:"+port) && str(sc, "metrics_path") == "/metrics" {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("prometheus.yml does not scrape hopgate:%s/metrics (admin_listen %s)", port, c.AdminListen)
	}
}

// Grafana provisioning resolves: data source uids the dashboards and the
// exemplar links rely on exist, and the dashboard provider's path is a
// mounted directory holding the generated failover board.
func TestGrafanaProvisioning(t *testing.T) {
	graf := composeService(t, "grafana")
	ms := bindMounts(graf)
	prov := hostPath(ms, "/etc/grafana/provisioning")
	if prov == "" {
		t.Fatal("grafana does not mount /etc/grafana/provisioning")
	}

	dsFiles, _ := filepath.Glob(filepath.Join(prov, "datasources", "*.yaml"))
	uids := map[string]string{} // uid → plugin type
	var datasources []any
	for _, f := range dsFiles {
		datasources = append(datasources, list(decodeOne(t, f), "datasources")...)
	}
	for _, ds := range datasources {
		uids[str(ds, "uid")] = str(ds, "type")
	}
	for uid, typ := range map[string]string{"prometheus": "prometheus", "jaeger": "jaeger", "tempo": "tempo"} {
		if uids[uid] != typ {
			t.Errorf("data source uid %q: type %q, want %q", uid, uids[uid], typ)
		}
	}
	for _, ds := range datasources {
		for _, d := range list(ds, "jsonData", "exemplarTraceIdDestinations") {
			if u := str(d, "datasourceUid"); uids[u] == "" {
				t.Errorf("data source %s: exemplar link to unknown uid %q", str(ds, "uid"), u)
			}
		}
	}
	promDS := -1
	for i, ds := range datasources {
		if str(ds, "uid") == "prometheus" {
			promDS = i
		}
	}
	if promDS < 0 || len(list(datasources[promDS], "jsonData", "exemplarTraceIdDestinations")) == 0 {
		t.Error("the Prometheus data source has no exemplarTraceIdDestinations")
	}

	provFiles, _ := filepath.Glob(filepath.Join(prov, "dashboards", "*.yaml"))
	if len(provFiles) == 0 {
		t.Fatal("no dashboard provider under grafana/provisioning/dashboards")
	}
	for _, f := range provFiles {
		for _, p := range list(decodeOne(t, f), "providers") {
			cpath := str(p, "options", "path")
			dir := hostPath(ms, cpath)
			if dir == "" {
				t.Errorf("%s: provider path %s is not mounted into grafana", f, cpath)
				continue
			}
			if fi, err := os.Stat(dir); err != nil || !fi.IsDir() {
				t.Errorf("%s: provider path %s → %s is not a directory (run `make dashboards`): %v", f, cpath, dir, err)
				continue
			}
			checkDashboard(t, filepath.Join(dir, "failover.json"), uids)
		}
	}
}

// checkDashboard checks that a generated dashboard parses and that every data
// source it names, by fixed uid or by a data source variable's plugin type,
// is provisioned.
func checkDashboard(t *testing.T, file string, uids map[string]string) {
	t.Helper()
	data, err := os.ReadFile(file)
	if err != nil {
		t.Errorf("dashboard: %v", err)
		return
	}
	var dash any
	if err := json.Unmarshal(data, &dash); err != nil {
		t.Errorf("%s: %v", file, err)
		return
	}
	types := map[string]bool{}
	for _, typ := range uids {
		types[typ] = true
	}
	for _, v := range list(dash, "templating", "list") {
		if str(v, "type") == "datasource" && !types[str(v, "query")] {
			t.Errorf("%s: variable %s wants a %q data source; none is provisioned", file, str(v, "name"), str(v, "query"))
		}
	}
	var walk func(any)
	walk = func(v any) {
		switch v := v.(type) {
		case map[string]any:
			if uid := str(v, "datasource", "uid"); uid != "" && !strings.HasPrefix(uid, "$") && uids[uid] == "" {
				t.Errorf("%s: data source uid %q is not provisioned", file, uid)
			}
			for _, c := range v {
				walk(c)
			}
		case []any:
			for _, c := range v {
				walk(c)
			}
		}
	}
	walk(dash)
}

// ---------------------------------------------------------------- collector

// collectorVersion is the otel/opentelemetry-collector-contrib image tag the
// allow-list below was taken from (its `components` output, cross-checked with
// the module sources of that version). Bumping the image fails
// TestCollectorComponents until the list is reviewed.
const collectorVersion = "0.140.1"

// collectorComponents is a small, explicit subset of the component types of
// otelcol-contrib 0.140.1: the ones this stack uses or could reasonably use.
// Notably absent: the `logging` exporter (removed in 0.111; use `debug`).
var collectorComponents = map[string][]string{
	"receivers":  {"otlp", "jaeger", "zipkin", "prometheus", "hostmetrics", "filelog", "kafka"},
	"processors": {"batch", "memory_limiter", "tail_sampling", "probabilistic_sampler", "attributes", "resource", "filter", "transform", "k8sattributes", "resourcedetection", "groupbytrace"},
	"exporters":  {"otlp", "otlphttp", "debug", "prometheus", "prometheusremotewrite", "kafka", "file", "loadbalancing"},
	"extensions": {"health_check", "healthcheckv2", "pprof", "zpages", "basicauth", "bearertokenauth", "file_storage"},
	"connectors": {"forward", "spanmetrics", "servicegraph", "routing"},
}

// componentType strips the optional "/name" suffix of a component id.
func componentType(id string) string {
	typ, _, _ := strings.Cut(id, "/")
	return typ
}

// The collector config uses only components of the pinned version, every
// pipeline reference is defined, and the sampling policies keep what the
// brief promises.
func TestCollectorComponents(t *testing.T) {
	img := str(composeService(t, "otel-collector"), "image")
	if _, tag, _ := strings.Cut(img, ":"); tag != collectorVersion {
		t.Fatalf("compose collector image %q: the allow-list was taken from %s; review it, then update collectorVersion", img, collectorVersion)
	}
	cfg := decodeOne(t, filepath.Join(composeDir, "otel-collector.yaml"))
	for section, allowed := range collectorComponents {
		for id := range mapping(cfg, section) {
			if !slices.Contains(allowed, componentType(id)) {
				t.Errorf("%s: %q is not a known component of otelcol-contrib %s", section, id, collectorVersion)
			}
		}
	}
	for _, id := range toStrings(list(cfg, "service", "extensions")) {
		if _, ok := mapping(cfg, "extensions")[id]; !ok {
			t.Errorf("service.extensions: %q is not defined", id)
		}
	}
	pipelines := mapping(cfg, "service", "pipelines")
	if len(pipelines) == 0 {
		t.Fatal("collector has no pipelines")
	}
	for name, p := range pipelines {
		for _, section := range []string{"receivers", "processors", "exporters"} {
			for _, id := range toStrings(list(p, section)) {
				_, defined := mapping(cfg, section)[id]
				_, connector := mapping(cfg, "connectors")[id]
				if !defined && !connector {
					t.Errorf("pipeline %s: %s %q is not defined", name, section, id)
				}
			}
		}
	}
	checkTailSampling(t, mapping(cfg, "processors", "tail_sampling"))
}

// checkTailSampling checks the sampling promise: keep every error and every
// failover, sample the rest; and guards against a top-level invert_match,
// whose InvertNotSampled decision vetoes every other policy (it would drop a
// failover that ended "ok").
func checkTailSampling(t *testing.T, ts map[string]any) {
	t.Helper()
	if ts == nil {
		t.Fatal("no tail_sampling processor")
	}
	var statusError, failover, timedOut, probabilistic bool
	for _, p := range list(ts, "policies") {
		switch str(p, "type") {
		case "boolean_attribute":
			timedOut = timedOut || str(p, "boolean_attribute", "key") == "hopgate.timed_out" && get(p, "boolean_attribute", "value") == true
		case "status_code":
			statusError = statusError || slices.Contains(toStrings(list(p, "status_code", "status_codes")), "ERROR")
		case "probabilistic":
			probabilistic = true
		case "string_attribute":
			if get(p, "string_attribute", "invert_match") == true {
				t.Errorf("policy %s: top-level invert_match vetoes all other policies; wrap it in an `and` policy", str(p, "name"))
			}
			if str(p, "string_attribute", "key") == "hopgate.failover.path" && get(p, "string_attribute", "enabled_regex_matching") == true {
				var res []*regexp.Regexp
				for _, v := range toStrings(list(p, "string_attribute", "values")) {
					re, err := regexp.Compile(v)
					if err != nil {
						t.Fatalf("policy %s: %v", str(p, "name"), err)
					}
					res = append(res, re)
				}
				matches := func(s string) bool {
					return slices.ContainsFunc(res, func(re *regexp.Regexp) bool { return re.MatchString(s) })
				}
				failover = matches("a:open -> b:503 -> c:ok") && matches("a:503 -> b:ok") && !matches("a:ok")
			}
		}
	}
	if !statusError {
		t.Error("tail_sampling keeps no status_code ERROR traces")
	}
	if !failover {
		t.Error("tail_sampling has no hopgate.failover.path regex policy that keeps multi-hop paths only")
	}
	if !timedOut {
		t.Error("tail_sampling does not keep traces with hopgate.timed_out: true (a gate commit on timeout, healthy by outcome and path)")
	}
	if !probabilistic {
		t.Error("tail_sampling has no probabilistic baseline")
	}
}

// ---------------------------------------------------------------- jaeger

// jaegerComponents is the component list of `jaeger components` for
// v1.76.0 (Jaeger v2.13.0), trimmed to the kinds deploy/jaeger/config.yaml
// may use; TestJaegerConfig re-checks it against the binary when it is built.
var jaegerComponents = map[string][]string{
	"receivers":  {"jaeger", "kafka", "nop", "otlp", "zipkin"},
	"processors": {"adaptive_sampling", "attributes", "batch", "filter", "memory_limiter", "tail_sampling"},
	"exporters":  {"debug", "jaeger_storage_exporter", "kafka", "nop", "otlp", "otlphttp", "prometheus"},
	"connectors": {"forward", "spanmetrics"},
	"extensions": {"basicauth", "expvar", "healthcheckv2", "jaeger_query", "jaeger_storage", "pprof", "remote_sampling", "remote_storage", "sigv4auth", "storage_cleaner", "zpages"},
}

// jaegerVersion reads the pinned Jaeger module version from deploy/jaeger/go.mod.
func jaegerVersion(t *testing.T) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(jaegerDir, "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*github\.com/jaegertracing/jaeger (v\S+)`).FindSubmatch(data)
	if m == nil {
		t.Fatal("deploy/jaeger/go.mod does not require github.com/jaegertracing/jaeger")
	}
	return string(m[1])
}

// jaegerBinary finds the binary deploy/jaeger/build.sh caches, or "".
func jaegerBinary(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("HOPGATE_JAEGER_BIN"); p != "" {
		return p
	}
	cache := os.Getenv("XDG_CACHE_HOME")
	if cache == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return ""
		}
		cache = filepath.Join(home, ".cache")
	}
	p := filepath.Join(cache, "hopgate", "jaeger-"+jaegerVersion(t), "jaeger")
	if fi, err := os.Stat(p); err != nil || fi.Mode()&0o111 == 0 {
		return ""
	}
	return p
}

// runJaeger runs the Jaeger binary with a deadline; stdout only (it logs its
// version line on stderr, returned with the error).
func runJaeger(t *testing.T, bin string, args ...string) ([]byte, error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 15*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return out, fmt.Errorf("%w\n%s", err, stderr.Bytes())
	}
	return out, nil
}

// The Jaeger config binds loopback by default and uses only components of the
// pinned Jaeger; when the binary is built, `jaeger validate` accepts the
// config (unknown keys and bad values included), and the collector config
// validates too, with the same contrib 0.140.1 components Jaeger embeds.
func TestJaegerConfig(t *testing.T) {
	file := filepath.Join(jaegerDir, "config.yaml")
	raw, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	// Tests and the demo run on shared machines: no listener may default to
	// anything but loopback.
	defaults := regexp.MustCompile(`\$\{env:(\w+):-([^}]*)\}`).FindAllSubmatch(raw, -1)
	wantEnv := []string{"JAEGER_OTLP_GRPC", "JAEGER_OTLP_HTTP", "JAEGER_QUERY_HTTP"}
	for _, m := range defaults {
		name, def := string(m[1]), string(m[2])
		wantEnv = slices.DeleteFunc(wantEnv, func(s string) bool { return s == name })
		if strings.Contains(def, ":") && !strings.HasPrefix(def, "127.0.0.1:") {
			t.Errorf("%s defaults to %s: must be 127.0.0.1", name, def)
		}
	}
	if len(wantEnv) > 0 {
		t.Errorf("config.yaml does not read %v", wantEnv)
	}

	cfg := decodeOne(t, file)
	used := map[string][]string{}
	for section := range jaegerComponents {
		for id := range mapping(cfg, section) {
			used[section] = append(used[section], componentType(id))
			if !slices.Contains(jaegerComponents[section], componentType(id)) {
				t.Errorf("%s: %q is not a component of Jaeger %s", section, id, jaegerVersion(t))
			}
		}
	}

	bin := jaegerBinary(t)
	if bin == "" {
		t.Skip("Jaeger binary not built (bash deploy/jaeger/build.sh); static checks done")
	}
	out, err := runJaeger(t, bin, "components")
	if err != nil {
		t.Fatalf("jaeger components: %v", err)
	}
	var comps map[string]any
	if err := yaml.Unmarshal(out, &comps); err != nil {
		t.Fatalf("jaeger components output: %v", err)
	}
	for section, types := range used {
		var have []string
		for _, c := range list(comps, section) {
			have = append(have, str(c, "name"))
		}
		for _, typ := range types {
			if !slices.Contains(have, typ) {
				t.Errorf("%s %q missing from `%s components`", section, typ, bin)
			}
		}
	}

	if out, err := runJaeger(t, bin, "validate", "--config", file); err != nil {
		t.Errorf("jaeger validate %s: %v\n%s", file, err, out)
	}

	// The collector config, minus components Jaeger does not embed (checked
	// by the allow-list instead), validated by the same collector library and
	// contrib version: this catches a misspelt tail-sampling key.
	col := decodeOne(t, filepath.Join(composeDir, "otel-collector.yaml"))
	jaegerHas := func(section, id string) bool {
		return slices.ContainsFunc(list(comps, section), func(c any) bool { return str(c, "name") == componentType(id) })
	}
	for _, section := range []string{"receivers", "processors", "exporters", "extensions", "connectors"} {
		for id := range mapping(col, section) {
			if !jaegerHas(section, id) {
				if section != "extensions" {
					t.Skipf("collector %s %q is not embedded in Jaeger: cannot validate the collector config with it", section, id)
				}
				delete(mapping(col, section), id)
			}
		}
	}
	svc := mapping(col, "service")
	svc["extensions"] = slices.DeleteFunc(list(svc, "extensions"), func(id any) bool {
		_, ok := mapping(col, "extensions")[id.(string)]
		return !ok
	})
	delete(svc, "telemetry") // binds :8888 in the container; irrelevant to validation
	tmp := filepath.Join(t.TempDir(), "otel-collector.yaml")
	data, err := yaml.Marshal(col)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		t.Fatal(err)
	}
	if out, err := runJaeger(t, bin, "validate", "--config", tmp); err != nil {
		t.Errorf("collector config rejected by the contrib %s components in Jaeger: %v\n%s", collectorVersion, err, out)
	}
}

// ---------------------------------------------------------------- small utils

func toStrings(l []any) []string {
	out := make([]string, 0, len(l))
	for _, v := range l {
		if s, ok := v.(string); ok {
			out = append(out, s)
		}
	}
	return out
}
