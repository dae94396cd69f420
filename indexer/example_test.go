package indexer_test

import (
	"fmt"
	"slices"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	corev1listers "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/indexer"
)

func examplePod(ns, name, ip string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: "1"},
		Status:     corev1.PodStatus{PodIP: ip},
	}
}

// A custom index: pods by IP address. The core writes the cache as the
// indexer actor does; any goroutine may read it.
func ExampleStore_byPodIP() {
	store := indexer.NewStore(nil, cache.Indexers{
		"byPodIP": func(obj any) ([]string, error) {
			pod, ok := obj.(*corev1.Pod)
			if !ok || pod.Status.PodIP == "" {
				return nil, nil
			}
			return []string{pod.Status.PodIP}, nil
		},
	})
	core := indexer.NewCore(store.Writer(), indexer.Config{})
	var deltas []fifo.Delta
	for _, p := range []*corev1.Pod{
		examplePod("default", "web-1", "10.0.0.1"),
		examplePod("default", "web-2", "10.0.0.2"),
		examplePod("batch", "job-1", "10.0.0.1"), // IPs may be reused across networks
		examplePod("default", "pending", ""),
	} {
		deltas = append(deltas, fifo.Delta{Type: fifo.Added, Key: p.Namespace + "/" + p.Name, Object: p})
	}
	core.Step(&fifo.Batch{Deltas: deltas}) // the messages it returns are for the actors

	pods, err := store.ByIndex("byPodIP", "10.0.0.1")
	if err != nil {
		panic(err)
	}
	var names []string
	for _, obj := range pods {
		p := obj.(*corev1.Pod)
		names = append(names, p.Namespace+"/"+p.Name)
	}
	slices.Sort(names)
	fmt.Println(names)
	// Output: [batch/job-1 default/web-1]
}

// Generated listers read the Store as they read client-go's indexer.
func ExampleStore_podLister() {
	store := indexer.NewStore(nil, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	// Seeding through the cache.Indexer methods works until the informer
	// starts (Seal); controller unit tests do this.
	for _, p := range []*corev1.Pod{
		examplePod("default", "web-1", ""),
		examplePod("default", "web-2", ""),
		examplePod("kube-system", "dns", ""),
	} {
		if err := store.Add(p); err != nil {
			panic(err)
		}
	}
	store.Seal()
	fmt.Println(store.Add(examplePod("default", "late", "")))

	pods, err := corev1listers.NewPodLister(store).Pods("default").List(labels.Everything())
	if err != nil {
		panic(err)
	}
	var names []string
	for _, p := range pods {
		names = append(names, p.Name)
	}
	slices.Sort(names)
	fmt.Println(names)
	// Output:
	// actorinformer: the informer's cache is read-only once it runs (a deliberate difference from client-go: its indexer actor is the only writer); change the object through the API server and the watch brings the change in
	// [web-1 web-2]
}
