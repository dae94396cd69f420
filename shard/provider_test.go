package shard_test

import (
	"sync"

	"github.com/asynkron/protoactor-go/cluster"
	"github.com/asynkron/protoactor-go/cluster/clusterproviders/test"
	"github.com/asynkron/protoactor-go/cluster/identitylookup/disthash"
	"github.com/asynkron/protoactor-go/remote"
)

// namedProvider is protoactor's in-memory provider with member ids of its
// own, as the k8s provider's (a uuid per cluster member): not the actor
// system's id, which the test provider uses.
type namedProvider struct {
	agent *test.InMemAgent
	id    string

	mu      sync.Mutex
	c       *cluster.Cluster
	stopped bool
}

func (p *namedProvider) StartMember(c *cluster.Cluster) error {
	host, port, err := c.ActorSystem.GetHostPort()
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.c = c
	p.mu.Unlock()
	p.agent.SubscribeStatusUpdate(p.notify)
	p.agent.RegisterService(test.NewAgentServiceStatus(p.id, host, port, c.GetClusterKinds()))
	return nil
}

func (p *namedProvider) StartClient(*cluster.Cluster) error { return nil }

func (p *namedProvider) Shutdown(bool) error {
	p.mu.Lock()
	p.stopped = true
	p.mu.Unlock()
	p.agent.DeregisterService(p.id)
	return nil
}

func (p *namedProvider) notify() {
	p.mu.Lock()
	c, stopped := p.c, p.stopped
	p.mu.Unlock()
	if c == nil || stopped {
		return
	}
	var members []*cluster.Member
	for _, st := range p.agent.GetStatusHealth() {
		members = append(members, &cluster.Member{Id: st.ID, Host: st.Host, Port: int32(st.Port), Kinds: st.Kinds})
	}
	c.MemberList.UpdateClusterTopology(members)
}

// startNamedCluster starts a cluster member whose provider names it id.
func startNamedCluster(agent *test.InMemAgent, id string) (*cluster.Cluster, *namedProvider) {
	prov := &namedProvider{agent: agent, id: id}
	c := cluster.New(quietSystem(), cluster.Configure("shard-test", prov, disthash.New(), remote.Configure("127.0.0.1", 0)))
	c.StartMember()
	return c, prov
}
