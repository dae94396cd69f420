package main

import (
	"context"
	"sync/atomic"
	"time"

	"github.com/asynkron/protoactor-go/remote"
	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"
)

// partition cuts one member off from the others' messages for a while: the
// protoactor messages it sends (the message batches of the gRPC streams its
// remote opened to the other members) and those it receives (the batches
// of the streams the others opened to its remote's server) are dropped,
// both ways, as a network that loses them would. Only message batches are
// dropped: the streams' handshakes pass, so no connection fails and no
// sender learns of the loss (no dead letter comes back). What it does not
// cut is the membership: the in-memory provider (test.InMemAgent) tells
// every member of the others in-process, so a partitioned member stays in
// everyone's topology (docs/sharding.md says what that shows and what it
// cannot). Its methods may be called by multiple goroutines simultaneously.
type partition struct {
	until   atomic.Int64 // unix nanoseconds; 0: not partitioned
	dropped atomic.Int64 // messages dropped
}

// remoteOptions are the gRPC options of the member's remote that route its
// streams through the partition.
func (p *partition) remoteOptions() []remote.ConfigOption {
	return []remote.ConfigOption{
		// Replacing the dial options drops protoactor's default, insecure
		// credentials on loopback: set them again.
		remote.WithDialOptions(grpc.WithTransportCredentials(insecure.NewCredentials()), grpc.WithStreamInterceptor(p.clientStream)),
		remote.WithServerOptions(grpc.StreamInterceptor(p.serverStream)),
	}
}

// start partitions the member for d from now.
func (p *partition) start(now time.Time, d time.Duration) { p.until.Store(now.Add(d).UnixNano()) }

// left is how long the partition lasts from now, 0 when none.
func (p *partition) left(now time.Time) time.Duration {
	u := p.until.Load()
	if u == 0 {
		return 0
	}
	return max(time.Duration(u-now.UnixNano()), 0)
}

// end ends the partition at once.
func (p *partition) end() { p.until.Store(0) }

// drops reports whether m is a message batch to drop now, and counts it.
func (p *partition) drops(m any) bool {
	rm, ok := m.(*remote.RemoteMessage)
	if !ok || rm.GetMessageBatch() == nil || p.left(time.Now()) == 0 {
		return false
	}
	p.dropped.Add(int64(len(rm.GetMessageBatch().GetEnvelopes())))
	return true
}

func (p *partition) clientStream(ctx context.Context, desc *grpc.StreamDesc, cc *grpc.ClientConn, method string, streamer grpc.Streamer, opts ...grpc.CallOption) (grpc.ClientStream, error) {
	cs, err := streamer(ctx, desc, cc, method, opts...)
	if err != nil {
		return nil, err
	}
	return droppingClientStream{ClientStream: cs, p: p}, nil
}

func (p *partition) serverStream(srv any, ss grpc.ServerStream, _ *grpc.StreamServerInfo, handler grpc.StreamHandler) error {
	return handler(srv, droppingServerStream{ServerStream: ss, p: p})
}

// droppingClientStream drops the batches the member sends while it is
// partitioned.
type droppingClientStream struct {
	grpc.ClientStream
	p *partition
}

func (s droppingClientStream) SendMsg(m any) error {
	if s.p.drops(m) {
		return nil
	}
	return s.ClientStream.SendMsg(m)
}

// droppingServerStream drops the batches the member receives while it is
// partitioned.
type droppingServerStream struct {
	grpc.ServerStream
	p *partition
}

func (s droppingServerStream) RecvMsg(m any) error {
	for {
		if err := s.ServerStream.RecvMsg(m); err != nil || !s.p.drops(m) {
			return err
		}
	}
}
