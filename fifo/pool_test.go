package fifo

import "testing"

// A recycled *Deltas comes back empty and without references to the
// objects it carried; a large one is left to the garbage collector.
func TestDeltasRecycling(t *testing.T) {
	d := NewDeltas(3)
	if len(d.Items) != 0 || cap(d.Items) < 3 {
		t.Fatalf("NewDeltas(3): len %d cap %d", len(d.Items), cap(d.Items))
	}
	obj := &struct{ Name string }{"a"}
	d.Items = append(d.Items, Delta{Type: Updated, Key: "ns/a", Object: obj})
	items := d.Items[:1]
	recycle(d)
	if len(d.Items) != 0 || items[0].Object != nil || items[0].Key != "" {
		t.Fatalf("recycled: len %d, first slot %+v", len(d.Items), items[0])
	}

	big := &Deltas{Items: make([]Delta, 1, maxPooledDeltas+1)}
	big.Items[0] = Delta{Object: obj}
	recycle(big)
	if big.Items[0].Object != obj {
		t.Fatal("a large *Deltas was cleared, so it was pooled")
	}
}
