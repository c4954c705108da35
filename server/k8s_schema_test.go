package server_test

import (
	"bytes"
	"errors"
	"io"
	"os"
	"path/filepath"
	"testing"

	yaml "go.yaml.in/yaml/v3"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	k8syaml "sigs.k8s.io/yaml"
)

// TestK8sManifestsMatchSchema decodes every Kubernetes object in deploy/k8s
// strictly into its typed API struct (k8s.io/api): an unknown or misspelt
// field, a wrong type or a bad quantity fails, as kubectl would refuse it.
func TestK8sManifestsMatchSchema(t *testing.T) {
	files, err := filepath.Glob(filepath.Join(deployDir, "k8s", "*.yaml"))
	if err != nil || len(files) == 0 {
		t.Fatalf("no manifests: %v", err)
	}
	kinds := map[string]func() any{
		"apps/v1/Deployment":       func() any { return &appsv1.Deployment{} },
		"apps/v1/StatefulSet":      func() any { return &appsv1.StatefulSet{} },
		"v1/Service":               func() any { return &corev1.Service{} },
		"v1/PersistentVolumeClaim": func() any { return &corev1.PersistentVolumeClaim{} },
		"v1/ConfigMap":             func() any { return &corev1.ConfigMap{} },
		"v1/Secret":                func() any { return &corev1.Secret{} },
		"v1/ServiceAccount":        func() any { return &corev1.ServiceAccount{} },
	}
	seen := 0
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		dec := yaml.NewDecoder(bytes.NewReader(data))
		for i := 0; ; i++ {
			var doc map[string]any
			if err := dec.Decode(&doc); errors.Is(err, io.EOF) {
				break
			} else if err != nil {
				t.Fatalf("%s: document %d: %v", f, i, err)
			}
			if doc == nil {
				continue
			}
			key := doc["apiVersion"].(string) + "/" + doc["kind"].(string)
			newObj, ok := kinds[key]
			if !ok {
				t.Errorf("%s: document %d: %s is not a kind this test knows; add it", f, i, key)
				continue
			}
			b, err := yaml.Marshal(doc)
			if err != nil {
				t.Fatal(err)
			}
			if err := k8syaml.UnmarshalStrict(b, newObj()); err != nil {
				t.Errorf("%s: document %d (%s): %v", f, i, key, err)
			}
			seen++
		}
	}
	if seen < 5 {
		t.Fatalf("checked %d objects, want the grpo StatefulSet, vLLM Deployment, Services…", seen)
	}
}

func TestK8sSchemaCheckCatchesTypos(t *testing.T) {
	bad := []byte("apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  replica: 2\n")
	if err := k8syaml.UnmarshalStrict(bad, &appsv1.Deployment{}); err == nil {
		t.Fatal("a misspelt field (replica) passed the strict decode")
	}
}
