package actors

import (
	"github.com/actorinformer/actorinformer/indexer"
	"github.com/actorinformer/actorinformer/listener"
)

// deliver takes in one batch as a listener actor that does not coalesce
// does: through its core, making at once the calls it sends the handler.
func (l *handlerListener) deliver(n *indexer.Notifications) {
	if l.core == nil {
		l.newCore()
	}
	for _, m := range l.core.Step(n) {
		if c, ok := m.Body.(*listener.Calls); ok {
			l.Call(c)
		}
	}
}
