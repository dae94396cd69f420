package shard

import (
	"reflect"
	"strconv"
	"testing"

	"google.golang.org/protobuf/proto"

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

// A Released's handoffs cross the wire whole, their final positions too.
func TestReleasedRoundTrip(t *testing.T) {
	in := handover.Handoff{Range: 3, Token: 9, Version: "120", From: "a#1", Position: 118}
	w, ok := toWire("g", "b#2", &handover.Released{From: "c#3", Epoch: 4, Ranges: []int{3}, Handoffs: []handover.Handoff{in}}).(*shardpb.Released)
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
	if len(back.Handoffs) != 1 {
		t.Fatalf("%d handoffs after the wire", len(back.Handoffs))
	}
	if out := handoffFromWire(back.Handoffs[0]); !reflect.DeepEqual(out, in) {
		t.Fatalf("Handoff after the wire:\n%+v\nwant\n%+v", out, in)
	}
}

// From a member that predates positions, a Released may carry a
// supplement (late objects of an earlier handoff, in an answer of epoch
// 0) and objects with its handoff: the supplement is dropped at the wire,
// the objects are not read, and the handoff's version stands for its
// position.
func TestOldMembersHandoffsFromTheWire(t *testing.T) {
	io := &memberIO{}
	w := &shardpb.Released{From: "old#1", Epoch: 4, Ranges: []int32{3}, Handoffs: []*shardpb.Handoff{
		{Range: 3, Token: 7, Version: "90", From: "old#1", Supplement: true, Objects: []*shardpb.ObjectRef{{Key: "ns/y"}}},
		{Range: 3, Token: 9, Version: "120", From: "old#1", Objects: []*shardpb.ObjectRef{{Key: "ns/x", Uid: "ux", Version: "101"}}},
	}}
	got := io.releasedFromWire(w)
	want := []handover.Handoff{{Range: 3, Token: 9, Version: "120", From: "old#1"}}
	if !reflect.DeepEqual(got.Handoffs, want) {
		t.Fatalf("handoffs %+v, want %+v", got.Handoffs, want)
	}
	if p := handoffPosition(&got.Handoffs[0]); p != (position{token: 9, version: 120}) {
		t.Fatalf("position %+v, want token 9 at 120", p)
	}
}
