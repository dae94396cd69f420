// Package calllog is the handler-call log of internal/shardmember, which the
// real-cluster tests of package shard read: one text line per handler call,
//
//	START_NS END_NS RANGE OP KEY UID RV MEMBER TOKEN [KIND]
//
// START_NS and END_NS are the call's start and end on CLOCK_REALTIME (Unix
// nanoseconds: comparable between processes of one machine), RANGE the
// index of the object's range, OP one of the Op values, KEY
// namespace/name, UID and RV the object's (the last known state's for a
// tombstone), MEMBER the member id of the process when the call ran and
// TOKEN the range's fencing token (0 while the member has none). The
// ownership calls (acquire, release) have "-" for KEY, UID and RV. KIND,
// written only for a kind a group added with shard's AddKind (its
// resource, such as "secrets"), tells that kind's handler calls from
// those of the group's first kind, whose lines end at TOKEN.
//
// [Writer] writes into a shared memory mapping of the file: a record costs
// a copy, with no system call, and the kernel keeps every record already
// copied when the process is killed (SIGKILL) or frozen. Only a record
// being copied at the instant of a SIGKILL can be torn; [Read] skips it and
// counts it.
package calllog

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strconv"
	"strings"
)

// Op is what a call was.
type Op string

const (
	// OpInitial is OnAdd(obj, true): an object of the range's initial list.
	OpInitial Op = "initial"
	// OpAdd is OnAdd(obj, false).
	OpAdd Op = "add"
	// OpUpdate is OnUpdate.
	OpUpdate Op = "update"
	// OpDelete is OnDelete with the object.
	OpDelete Op = "delete"
	// OpTombstone is OnDelete with a cache.DeletedFinalStateUnknown.
	OpTombstone Op = "tombstone"
	// OpAcquire is OnAcquire: the member starts delivering the range.
	OpAcquire Op = "acquire"
	// OpRelease is OnRelease: the member stopped delivering the range.
	OpRelease Op = "release"
)

// Object reports whether op is a call about an object (not an ownership
// call).
func (op Op) Object() bool { return op != OpAcquire && op != OpRelease }

// Deletion reports whether op tells the handler that the object is gone.
func (op Op) Deletion() bool { return op == OpDelete || op == OpTombstone }

func validOp(op Op) bool {
	switch op {
	case OpInitial, OpAdd, OpUpdate, OpDelete, OpTombstone, OpAcquire, OpRelease:
		return true
	}
	return false
}

// Record is one handler call.
type Record struct {
	Start, End int64 // Unix nanoseconds
	Range      int
	Op         Op
	Key        string
	UID        string
	RV         string
	Member     string
	Token      uint64
	// Kind is the kind of the handler's informer: "" for the group's
	// first kind (shard.New's), AddKind's resource for another.
	Kind string
}

// fields is the number of a line's fields; a line of a kind other than
// the group's first has one more (KIND).
const fields = 9

func field(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

// Append appends r as one line, newline included. Empty strings are
// written as "-"; spaces in them would break the line, and none of a
// Kubernetes key, UID, resourceVersion or protoactor member id has one.
func (r Record) Append(b []byte) []byte {
	b = strconv.AppendInt(b, r.Start, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, r.End, 10)
	b = append(b, ' ')
	b = strconv.AppendInt(b, int64(r.Range), 10)
	b = append(b, ' ')
	b = append(b, r.Op...)
	b = append(b, ' ')
	b = append(b, field(r.Key)...)
	b = append(b, ' ')
	b = append(b, field(r.UID)...)
	b = append(b, ' ')
	b = append(b, field(r.RV)...)
	b = append(b, ' ')
	b = append(b, field(r.Member)...)
	b = append(b, ' ')
	b = strconv.AppendUint(b, r.Token, 10)
	if r.Kind != "" {
		b = append(b, ' ')
		b = append(b, r.Kind...)
	}
	return append(b, '\n')
}

func (r Record) String() string { return strings.TrimSuffix(string(r.Append(nil)), "\n") }

func unfield(s string) string {
	if s == "-" {
		return ""
	}
	return s
}

// Parse reads one line (without its newline).
func Parse(line string) (Record, error) {
	f := strings.Fields(line)
	if len(f) != fields && len(f) != fields+1 {
		return Record{}, fmt.Errorf("calllog: %d fields, want %d or %d: %q", len(f), fields, fields+1, line)
	}
	var (
		r   Record
		err error
	)
	if r.Start, err = strconv.ParseInt(f[0], 10, 64); err != nil {
		return Record{}, fmt.Errorf("calllog: start: %w", err)
	}
	if r.End, err = strconv.ParseInt(f[1], 10, 64); err != nil {
		return Record{}, fmt.Errorf("calllog: end: %w", err)
	}
	if r.Range, err = strconv.Atoi(f[2]); err != nil {
		return Record{}, fmt.Errorf("calllog: range: %w", err)
	}
	r.Op = Op(f[3])
	if !validOp(r.Op) {
		return Record{}, fmt.Errorf("calllog: unknown op %q", f[3])
	}
	r.Key, r.UID, r.RV, r.Member = unfield(f[4]), unfield(f[5]), unfield(f[6]), unfield(f[7])
	if r.Token, err = strconv.ParseUint(f[8], 10, 64); err != nil {
		return Record{}, fmt.Errorf("calllog: token: %w", err)
	}
	if len(f) > fields {
		r.Kind = f[fields]
	}
	if r.End < r.Start {
		return Record{}, fmt.Errorf("calllog: ends before it starts: %q", line)
	}
	return r, nil
}

// Read reads a log. Torn counts the records a kill cut short (at most one
// per writer); any other malformed line is an error.
func Read(path string) (records []Record, torn int, err error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, 0, err
	}
	return parseAll(b)
}

func parseAll(b []byte) ([]Record, int, error) {
	var (
		out  []Record
		torn int
	)
	lines := bytes.Split(b, []byte{'\n'})
	// The bytes after the last newline: the unused rest of the mapping
	// (zeros), or a record that a kill cut short.
	last := lines[len(lines)-1]
	lines = lines[:len(lines)-1]
	if len(bytes.Trim(last, "\x00")) > 0 {
		torn++
	}
	for i, l := range lines {
		if len(l) == 0 {
			continue // padding at the end of a mapped chunk
		}
		if bytes.IndexByte(l, 0) >= 0 {
			// A record that a kill cut short, whose newline was stored
			// before the rest of its bytes.
			torn++
			continue
		}
		r, err := Parse(string(l))
		if err != nil {
			return out, torn, fmt.Errorf("line %d: %w", i+1, err)
		}
		out = append(out, r)
	}
	return out, torn, nil
}

// ErrClosed is returned by Write after Close.
var ErrClosed = errors.New("calllog: closed")
