package reflector

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/actorinformer/actorinformer/fifo"
	"github.com/actorinformer/actorinformer/telemetry"
)

// defaultPageSize is tools/pager's default page size.
const defaultPageSize = 500

// listing is StateListing: the list in flight, which is the sync's first
// attempt or its one retry at RV "".
type listing struct {
	rv      string // the RV the sync's first attempt asked for
	page    int64  // the pager's page size; 0 lists in one request
	retried bool   // the one retry after an expired or too-large RV is spent
}

func (*listing) kind() State { return StateListing }

func (m *Machine) startList(e *effects) {
	m.syncStarted()
	rv := m.relistRV()
	l := &listing{rv: rv}
	switch {
	case m.s.cfg.PageSize != 0:
		l.page = m.s.cfg.PageSize
	case m.sync.paginated:
		// The first list came back paginated: the watch cache is probably
		// off, keep paginating.
		l.page = defaultPageSize
	case rv != "" && rv != "0":
		// Unpaginated, so the watch cache can serve it (it ignores RV !=
		// "0" lists with a limit) rather than etcd.
		l.page = 0
	default:
		l.page = defaultPageSize
	}
	m.issueList(e, l, metav1.ListOptions{ResourceVersion: rv})
}

func (m *Machine) issueList(e *effects, l *listing, opts metav1.ListOptions) {
	m.gen++
	m.enter(l)
	e.List = &ListRequest{Gen: m.gen, Options: opts, PageSize: l.page}
	m.s.tel.Metrics.Relist()
}

// listDone takes the result of the list in flight, l.
func (m *Machine) listDone(e *effects, l *listing, res ListResult) {
	if res.Err == nil && isNil(res.List) {
		res.Err = fmt.Errorf("list returned no object")
	}
	if err := res.Err; err != nil {
		m.countError(err, false)
		if !l.retried && (isExpiredError(err) || isTooLargeResourceVersionError(err)) {
			// The RV we listed at is gone or not there yet: list once more,
			// at the latest RV (""), with the same pager, as client-go does.
			m.sync.rvUnavailable = true
			l.retried = true
			m.issueList(e, l, metav1.ListOptions{ResourceVersion: m.relistRV()})
			return
		}
		m.endListAndWatch(e, fmt.Errorf("failed to list %v: %w", m.s.typeDesc, err))
		return
	}
	if bad, gvk := isUnsupportedTableListObject(res.List); bad {
		m.endListAndWatch(e, fmt.Errorf("failed to list %v: unsupported list gvk: %v", m.s.typeDesc, gvk))
		return
	}
	// Only a paginated answer to RV "0" says the watch cache is off; a
	// paginated RV "" answer comes from etcd whatever the cache does.
	if l.rv == "0" && res.Paginated {
		m.sync.paginated = true
	}
	m.sync.rvUnavailable = false
	listMeta, err := meta.ListAccessor(res.List)
	if err != nil {
		m.endListAndWatch(e, fmt.Errorf("unable to understand list result %T: %v", res.List, err))
		return
	}
	rv := listMeta.GetResourceVersion()
	items, err := meta.ExtractListWithAlloc(res.List)
	if err != nil {
		m.endListAndWatch(e, fmt.Errorf("unable to understand list result %T (%v)", res.List, err))
		return
	}
	m.s.tel.Metrics.ReflectorReceived(len(items))
	m.stampBatch(res.ReceivedAt)
	// One spare slot: the queue appends the list's bookmark.
	rep := &fifo.Replace{Items: make([]fifo.Delta, 0, len(items)+1), ResourceVersion: rv}
	if res.Span.IsValid() {
		rep.ListTrace = &telemetry.DeltaTrace{Parent: res.Span, Since: res.ReceivedAt}
	}
	for _, item := range items {
		if isNil(item) {
			m.drop(DropNilObject, "LIST", nil)
			continue
		}
		acc, err := meta.Accessor(item)
		if err != nil {
			m.drop(DropNoMeta, "LIST", err)
			continue
		}
		if d, ok := m.delta(fifo.Replaced, item, acc, "LIST", res.ReceivedAt, res.Span); ok {
			rep.Items = append(rep.Items, d)
		}
	}
	m.toQueue(rep)
	m.listTimed()
	m.setRV(rv)
	m.synced(false)
	m.s.log.Debug("Caches populated", "reflector", m.s.name, "type", m.s.typeDesc, "items", len(rep.Items), "resourceVersion", rv)
	m.startWatch(e)
}
