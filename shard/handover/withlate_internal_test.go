package handover

import (
	"slices"
	"testing"
)

// A late Handoff merged into a member's own keeps the own objects first,
// adds the late ones it lacks, and carries the deletes both senders'
// handlers were given, each once.
func TestWithLateCarriesDeleted(t *testing.T) {
	own := &Handoff{Range: 1, Token: 5, Objects: []ObjectRef{{Key: "ns/a", UID: "ua", Version: "9"}}, Deleted: []string{"ux", "uy"}}
	late := &Handoff{Range: 1, Token: 3, Objects: []ObjectRef{{Key: "ns/a", UID: "ua", Version: "2"}, {Key: "ns/b", UID: "ub", Version: "3"}},
		Deleted: []string{"uy", "uz"}}
	got := withLate(own, late)
	if got.Token != 5 || len(got.Objects) != 2 || got.Objects[0].Version != "9" || got.Objects[1].Key != "ns/b" {
		t.Errorf("merged objects %+v (token %d)", got.Objects, got.Token)
	}
	if !slices.Equal(got.Deleted, []string{"ux", "uy", "uz"}) {
		t.Errorf("merged deletes %v, want ux, uy, uz", got.Deleted)
	}
	if !slices.Equal(own.Deleted, []string{"ux", "uy"}) {
		t.Errorf("own's deletes changed to %v", own.Deleted)
	}
	if got := withLate(nil, late); !slices.Equal(got.Deleted, late.Deleted) || got.Supplement {
		t.Errorf("a late Handoff alone: deletes %v, supplement %v", got.Deleted, got.Supplement)
	}
	if got := withLate(own, &Handoff{Objects: late.Objects}); !slices.Equal(got.Deleted, own.Deleted) {
		t.Errorf("a late Handoff with no deletes: %v", got.Deleted)
	}
}
