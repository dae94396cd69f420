package reflector

// backingOff is StateBackingOff: waiting for the backoff timer before the
// next step.
type backingOff struct {
	next nextStep // what the wait leads to
}

func (*backingOff) kind() State { return StateBackingOff }

// nextStep is what a backoff leads to.
type nextStep uint8

const (
	stepListAndWatch nextStep = iota // client-go's next ListAndWatch: watch-list or list, then watch
	stepWatch                        // re-watch from the last RV, no relist
	stepWatchList                    // retry the watch-list stream
)

// waitThen backs off, then takes next.
func (m *Machine) waitThen(e *effects, next nextStep) {
	m.gen++
	m.enter(&backingOff{next: next})
	e.Wait = &waitRequest{Gen: m.gen, Duration: m.delay()}
}

// backoffElapsed takes the end of the wait b.
func (m *Machine) backoffElapsed(e *effects, b *backingOff) {
	switch b.next {
	case stepListAndWatch:
		m.listAndWatch(e)
	case stepWatch:
		m.startWatch(e)
	case stepWatchList:
		m.startWatchList(e)
	}
}
