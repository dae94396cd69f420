package calllog

import (
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
)

func rec(i int) Record {
	return Record{Start: int64(1e18) + int64(i)*10, End: int64(1e18) + int64(i)*10 + 5, Range: i % 16, Op: OpUpdate,
		Key: fmt.Sprintf("ns/o%d", i), UID: fmt.Sprintf("uid-%d", i), RV: strconv.Itoa(1000 + i), Member: "m-1", Token: uint64(i % 3)}
}

func TestRoundTripAcrossChunks(t *testing.T) {
	path := filepath.Join(t.TempDir(), "calls")
	w, err := Create(path)
	if err != nil {
		t.Fatal(err)
	}
	// Enough records to cross a chunk boundary.
	n := 2*chunk/len(rec(0).Append(nil)) + 7
	for i := range n {
		if err := w.Write(rec(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := w.Write(Record{Start: 1, End: 2, Range: 3, Op: OpAcquire, Member: "m-1"}); err != nil {
		t.Fatal(err)
	}
	if err := w.Close(); err != nil {
		t.Fatal(err)
	}
	if err := w.Write(rec(0)); err != ErrClosed {
		t.Errorf("Write after Close: %v, want ErrClosed", err)
	}
	got, torn, err := Read(path)
	if err != nil || torn != 0 {
		t.Fatalf("Read: %v, %d torn", err, torn)
	}
	if len(got) != n+1 {
		t.Fatalf("read %d records, want %d", len(got), n+1)
	}
	for i := range n {
		if got[i] != rec(i) {
			t.Fatalf("record %d: %+v, want %+v", i, got[i], rec(i))
		}
	}
	if a := got[n]; a.Op != OpAcquire || a.Key != "" || a.UID != "" || a.RV != "" || a.Range != 3 {
		t.Errorf("acquire read back as %+v", a)
	}
	st, _ := os.Stat(path)
	if want := int64(n) * int64(len(rec(0).Append(nil))); st.Size() < want || st.Size() > want+chunk {
		t.Errorf("file of %d bytes after Close, want about %d", st.Size(), want)
	}
}

// TestKilledWriterLosesNothing runs a writer in a child process that kills
// itself with SIGKILL after its last record, without closing: every record
// must be read back.
func TestKilledWriterLosesNothing(t *testing.T) {
	if path := os.Getenv("CALLLOG_CHILD"); path != "" {
		w, err := Create(path)
		if err != nil {
			os.Exit(3)
		}
		for i := range 1000 {
			if w.Write(rec(i)) != nil {
				os.Exit(4)
			}
		}
		_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
		select {}
	}
	path := filepath.Join(t.TempDir(), "calls")
	cmd := exec.Command(os.Args[0], "-test.run", "^TestKilledWriterLosesNothing$")
	cmd.Env = append(os.Environ(), "CALLLOG_CHILD="+path)
	err := cmd.Run()
	ee, ok := err.(*exec.ExitError)
	if !ok || ee.Sys().(syscall.WaitStatus).Signal() != syscall.SIGKILL {
		t.Fatalf("child: %v, want killed by SIGKILL", err)
	}
	got, torn, err := Read(path)
	if err != nil || torn != 0 || len(got) != 1000 {
		t.Fatalf("after the kill: %d records, %d torn, %v; want 1000, 0, nil", len(got), torn, err)
	}
}

func TestTornAndBadLines(t *testing.T) {
	good := string(rec(1).Append(nil))
	cut := rec(2).Append(nil)
	cut = cut[:len(cut)/2]
	// A record cut short at the end, then the mapping's zeros.
	recs, torn, err := parseAll(append(append([]byte(good), cut...), make([]byte, 64)...))
	if err != nil || torn != 1 || len(recs) != 1 {
		t.Errorf("cut at the end: %d records, %d torn, %v; want 1, 1, nil", len(recs), torn, err)
	}
	// A record whose newline was stored before some of its bytes.
	holey := rec(2).Append(nil)
	holey[3] = 0
	recs, torn, err = parseAll(append([]byte(good), holey...))
	if err != nil || torn != 1 || len(recs) != 1 {
		t.Errorf("zero inside: %d records, %d torn, %v; want 1, 1, nil", len(recs), torn, err)
	}
	for _, bad := range []string{"1 2 3 add k u r m\n", "1 2 3 frob k u r m 0\n", "5 2 3 add k u r m 0\n", "x 2 3 add k u r m 0\n"} {
		if _, _, err := parseAll([]byte(good + bad)); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A record of a group's added kind carries its kind as a tenth field; a
// record of the first kind keeps nine, as before kinds.
func TestKindField(t *testing.T) {
	first := rec(1)
	if n := len(strings.Fields(first.String())); n != fields {
		t.Errorf("first kind's line has %d fields, want %d: %q", n, fields, first)
	}
	other := rec(2)
	other.Kind = "secrets"
	line := other.String()
	if !strings.HasSuffix(line, " 2 secrets") {
		t.Errorf("added kind's line %q, want it to end with its token and kind", line)
	}
	for _, r := range []Record{first, other} {
		if got, err := Parse(r.String()); err != nil || got != r {
			t.Errorf("Parse(%q) = %+v, %v; want %+v", r, got, err, r)
		}
	}
	if _, err := Parse(line + " extra"); err == nil {
		t.Errorf("11 fields: no error")
	}
}
