package testcluster

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// Apply applies manifests (YAML or JSON, one or more documents) with
// server-side apply, as `kubectl apply --server-side` does, each object
// in the order given, and returns them as the server stored them. With
// dryRun the server checks and admits them but stores nothing.
func Apply(ctx context.Context, cfg *rest.Config, manifests []byte, fieldManager string, dryRun bool) ([]*unstructured.Unstructured, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	client, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dec := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(manifests), 4096)
	var out []*unstructured.Unstructured
	for {
		var doc map[string]any
		if err := dec.Decode(&doc); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return out, err
		}
		if len(doc) == 0 {
			continue // an empty document (a comment, a trailing ---)
		}
		obj := &unstructured.Unstructured{Object: doc}
		gvk := obj.GroupVersionKind()
		m, err := mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return out, fmt.Errorf("%s %s: %w", gvk, obj.GetName(), err)
		}
		data, err := obj.MarshalJSON()
		if err != nil {
			return out, err
		}
		var ri dynamic.ResourceInterface = client.Resource(m.Resource)
		if obj.GetNamespace() != "" {
			ri = client.Resource(m.Resource).Namespace(obj.GetNamespace())
		}
		opts := metav1.PatchOptions{FieldManager: fieldManager, Force: ptrTo(true)}
		if dryRun {
			opts.DryRun = []string{metav1.DryRunAll}
		}
		applied, err := ri.Patch(ctx, obj.GetName(), types.ApplyPatchType, data, opts)
		if err != nil {
			return out, fmt.Errorf("apply %s %s/%s: %w", gvk.Kind, obj.GetNamespace(), obj.GetName(), err)
		}
		out = append(out, applied)
	}
}

func ptrTo[T any](v T) *T { return &v }
