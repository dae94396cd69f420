package actors

import (
	"reflect"
	"testing"
)

// TestStatsAddCounters: every integer field of Stats is summed, but the
// gauges; so a counter added to Stats later is summed too, or this fails.
func TestStatsAddCounters(t *testing.T) {
	gauges := map[string]bool{"QueueBacklog": true, "CacheSize": true}
	var o Stats
	ov := reflect.ValueOf(&o).Elem()
	for i := range ov.NumField() {
		if f := ov.Field(i); f.CanInt() {
			f.SetInt(int64(i + 1))
		}
	}
	st := Stats{QueueBacklog: 100, CacheSize: 100}
	st.AddCounters(o)
	st.AddCounters(o)
	sv := reflect.ValueOf(st)
	for i := range sv.NumField() {
		f, name := sv.Field(i), sv.Type().Field(i).Name
		if !f.CanInt() {
			continue
		}
		want := 2 * int64(i+1)
		if gauges[name] {
			want = 100
		}
		if f.Int() != want {
			t.Errorf("%s = %d after adding %d twice, want %d", name, f.Int(), i+1, want)
		}
	}
}
