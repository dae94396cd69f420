// Command demo runs actorinformer's SharedIndexInformer on pods and prints
// what flows through each stage every second, the totals at the end, and one
// delta's trace from the watch to every handler, then on to the reconcile of
// its key by a controller's worker, through the traced workqueue.
//
// With no flags it needs no cluster: a simulated one (client-go's fake
// clientset and a workload generator) creates, updates and deletes pods.
// --kubeconfig, $KUBECONFIG or the in-cluster config watch a real cluster
// instead. Tracing and metrics follow the standard OTEL_* environment
// variables; see -h.
//
// A web page on 127.0.0.1:8080 (--http) shows the pipeline live: the actor
// graph with rates and backlogs, the handlers' latencies, the informer's
// state, the last traces as waterfalls from an in-process span ring, a key
// search, and faults to inject into the simulated cluster. Its data API
// (server.go, api.go) is JSON under /api/; --metrics adds /metrics.
package main
