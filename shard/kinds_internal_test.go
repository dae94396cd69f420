package shard

import "testing"

// The settings name the kinds after New's, in any order, and a one-kind
// group's are as before groups had kinds (members of earlier versions
// compare them).
func TestHashSettingNamesTheAddedKinds(t *testing.T) {
	group := func(keys ...string) *shared {
		sh := &shared{o: options{field: Namespace}}
		sh.newKind(nil, nil, "")
		for _, k := range keys {
			sh.newKind(nil, nil, k)
		}
		return sh
	}
	if got := group().settings(); got != "object.metadata.namespace;protocol=3" {
		t.Errorf("one kind: %q", got)
	}
	a, b := group("secrets", "replicasets.apps"), group("replicasets.apps", "secrets")
	if a.settings() != b.settings() || a.hashSetting() != "object.metadata.namespace+kinds=replicasets.apps,secrets" {
		t.Errorf("two orders: %q and %q", a.settings(), b.settings())
	}
	if group("secrets").hashSetting() == group("configmaps").hashSetting() {
		t.Error("other kinds, one setting")
	}
}
