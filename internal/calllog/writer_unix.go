//go:build unix

package calllog

import (
	"fmt"
	"os"
	"sync"
	"syscall"
)

// chunk is the size of one mapping of the file; the file grows by chunks
// and Close truncates it to what was written.
const chunk = 4 << 20

// Writer appends records to a log file through a shared memory mapping.
// Its methods are safe for concurrent use.
type Writer struct {
	mu     sync.Mutex
	f      *os.File
	m      []byte // the mapped chunk
	base   int64  // the chunk's offset in the file
	off    int    // where the next record goes in m
	buf    []byte
	closed bool
}

// Create creates (or truncates) the log file at path.
func Create(path string) (*Writer, error) {
	f, err := os.OpenFile(path, os.O_RDWR|os.O_CREATE|os.O_TRUNC, 0o644)
	if err != nil {
		return nil, err
	}
	w := &Writer{f: f}
	if err := w.mapChunk(0); err != nil {
		f.Close()
		return nil, err
	}
	return w, nil
}

func (w *Writer) mapChunk(base int64) error {
	if err := w.f.Truncate(base + chunk); err != nil {
		return fmt.Errorf("calllog: grow %s: %w", w.f.Name(), err)
	}
	m, err := syscall.Mmap(int(w.f.Fd()), base, chunk, syscall.PROT_READ|syscall.PROT_WRITE, syscall.MAP_SHARED)
	if err != nil {
		return fmt.Errorf("calllog: map %s: %w", w.f.Name(), err)
	}
	w.m, w.base, w.off = m, base, 0
	return nil
}

// Write appends r. The record is in the kernel's page cache when Write
// returns: a kill of the process does not lose it.
func (w *Writer) Write(r Record) error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		return ErrClosed
	}
	w.buf = r.Append(w.buf[:0])
	n := len(w.buf)
	if n > chunk {
		return fmt.Errorf("calllog: a record of %d bytes", n)
	}
	if w.off+n > len(w.m) {
		// Newlines pad the chunk's rest: the reader skips empty lines.
		for i := w.off; i < len(w.m); i++ {
			w.m[i] = '\n'
		}
		if err := syscall.Munmap(w.m); err != nil {
			return err
		}
		w.m = nil
		if err := w.mapChunk(w.base + chunk); err != nil {
			w.closed = true
			return err
		}
	}
	// The newline last: a record cut short by a kill has none, and the
	// reader tells it apart.
	copy(w.m[w.off:], w.buf[:n-1])
	w.m[w.off+n-1] = '\n'
	w.off += n
	return nil
}

// Close unmaps the file and truncates it to the records written.
func (w *Writer) Close() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.closed {
		if w.f != nil {
			err := w.f.Close()
			w.f = nil
			return err
		}
		return nil
	}
	w.closed = true
	var errs []error
	if w.m != nil {
		errs = append(errs, syscall.Munmap(w.m))
		w.m = nil
		errs = append(errs, w.f.Truncate(w.base+int64(w.off)))
	}
	errs = append(errs, w.f.Close())
	w.f = nil
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}
