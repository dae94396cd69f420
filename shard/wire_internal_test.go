package shard

import (
	"reflect"
	"strconv"
	"testing"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

// A Hello crosses the wire whole: the tokens of its active ranges too,
// which make a kept handoff stale at its receiver, and those of its moves,
// which make a move older than a delivery its receiver knows of stale.
func TestHelloRoundTrip(t *testing.T) {
	in := &handover.Hello{From: "a#1", Ranges: 16, HashField: "uid;protocol=" + strconv.Itoa(protocolVersion),
		JoinedAt: 7, State: handover.Leaving, Active: []int{2, 5}, Tokens: []uint64{41, 43},
		View: []handover.MemberID{"a#1", "b#2"}, Moved: []handover.Move{{Range: 3, To: "b#2", Token: 40}}, Reply: true}
	w, ok := toWire("g", "b#2", in).(*shardpb.Hello)
	if !ok {
		t.Fatalf("toWire gave %T", toWire("g", "b#2", in))
	}
	if out := helloFromWire(w); !reflect.DeepEqual(out, in) {
		t.Fatalf("Hello after the wire:\n%+v\nwant\n%+v", out, in)
	}
}
