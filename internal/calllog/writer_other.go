//go:build !unix

package calllog

import "errors"

// Writer appends records to a log file; it needs a unix system.
type Writer struct{}

// Create fails: the log is written through a shared memory mapping.
func Create(string) (*Writer, error) {
	return nil, errors.New("calllog: needs a unix system (a shared memory mapping of the file)")
}

// Write is never reached: Create fails.
func (w *Writer) Write(Record) error { return ErrClosed }

// Close does nothing.
func (w *Writer) Close() error { return nil }
