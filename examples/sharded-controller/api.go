package main

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
)

// GroupVersion is the Bundle's API group and version (deploy/crd.yaml).
var GroupVersion = schema.GroupVersion{Group: "example.actorinformer.io", Version: "v1alpha1"}

// Bundle is the controller's kind: namespaced, its spec a map of data that
// the controller copies into a ConfigMap of the same name, owned by it.
type Bundle struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`

	Spec BundleSpec `json:"spec,omitempty"`
}

// BundleSpec is what a Bundle's ConfigMap carries.
type BundleSpec struct {
	Data map[string]string `json:"data,omitempty"`
}

// BundleList is a list of Bundles.
type BundleList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`

	Items []Bundle `json:"items"`
}

// DeepCopyInto, DeepCopy and DeepCopyObject are written by hand (what
// controller-gen would generate).
func (in *Bundle) DeepCopyInto(out *Bundle) {
	*out = *in
	out.TypeMeta = in.TypeMeta
	in.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if in.Spec.Data != nil {
		out.Spec.Data = make(map[string]string, len(in.Spec.Data))
		for k, v := range in.Spec.Data {
			out.Spec.Data[k] = v
		}
	}
}

func (in *Bundle) DeepCopy() *Bundle {
	if in == nil {
		return nil
	}
	out := new(Bundle)
	in.DeepCopyInto(out)
	return out
}

func (in *Bundle) DeepCopyObject() runtime.Object { return in.DeepCopy() }

func (in *BundleList) DeepCopyObject() runtime.Object {
	if in == nil {
		return nil
	}
	out := &BundleList{TypeMeta: in.TypeMeta}
	in.ListMeta.DeepCopyInto(&out.ListMeta)
	if in.Items != nil {
		out.Items = make([]Bundle, len(in.Items))
		for i := range in.Items {
			in.Items[i].DeepCopyInto(&out.Items[i])
		}
	}
	return out
}

// newScheme has client-go's kinds and the Bundle's.
func newScheme() (*runtime.Scheme, error) {
	s := runtime.NewScheme()
	if err := clientgoscheme.AddToScheme(s); err != nil {
		return nil, err
	}
	s.AddKnownTypes(GroupVersion, &Bundle{}, &BundleList{})
	metav1.AddToGroupVersion(s, GroupVersion)
	return s, nil
}
