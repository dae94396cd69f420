package shard

import (
	"reflect"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

	"github.com/actorinformer/actorinformer/shard/handover"
	"github.com/actorinformer/actorinformer/shard/internal/shardpb"
)

// A Hello crosses the wire whole.
func TestHelloRoundTrip(t *testing.T) {
	in := &handover.Hello{From: "a#1", Ranges: 16, HashField: "uid;protocol=" + strconv.Itoa(protocolVersion),
		JoinedAt: 7, State: handover.Leaving, Active: []int{2, 5}, Listing: []int{1, 9},
		View: []handover.MemberID{"a#1", "b#2"}, Reply: true, KnowsYou: true}
	w, ok := toWire("g", "b#2", in).(*shardpb.Hello)
	if !ok {
		t.Fatalf("toWire gave %T", toWire("g", "b#2", in))
	}
	if out := helloFromWire(w); !reflect.DeepEqual(out, in) {
		t.Fatalf("Hello after the wire:\n%+v\nwant\n%+v", out, in)
	}
}

// A Released crosses the wire whole: the records as the sender knows
// them.
func TestReleasedRoundTrip(t *testing.T) {
	in := &handover.Released{From: "c#3", Epoch: 4, Ranges: []int{3},
		Records: []handover.RecordState{{Range: 3, Gen: 7, Next: "b#2"}}}
	w, ok := toWire("g", "b#2", in).(*shardpb.Released)
	if !ok {
		t.Fatal("toWire gave no Released")
	}
	b, err := proto.Marshal(w)
	if err != nil {
		t.Fatal(err)
	}
	var back shardpb.Released
	if err := proto.Unmarshal(b, &back); err != nil {
		t.Fatal(err)
	}
	io := &memberIO{}
	if out := io.releasedFromWire(&back); !reflect.DeepEqual(out, in) {
		t.Fatalf("Released after the wire:\n%+v\nwant\n%+v", out, in)
	}
}
