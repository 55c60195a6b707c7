package replay

import (
	"context"
	"errors"
	"net"
	"net/http"
	"sync"

	"github.com/hopgate/hopgate/dispatch"
)

// network is an in-memory network: each host name has a listener whose
// connections are net.Pipe ends, so nothing of a run touches the kernel
// (a goroutine blocked on a pipe is visible to Settle; one blocked in the
// netpoller is not).
type network struct {
	mu        sync.Mutex
	listeners map[string]*pipeListener
}

func newNetwork() *network { return &network{listeners: map[string]*pipeListener{}} }

// listen returns the listener of addr ("host:port").
func (n *network) listen(addr string) *pipeListener {
	n.mu.Lock()
	defer n.mu.Unlock()
	l := &pipeListener{addr: pipeAddr(addr), conns: make(chan net.Conn, 64), done: make(chan struct{})}
	n.listeners[addr] = l
	return l
}

var errNoHost = errors.New("replay: no such host on the in-memory network")

func (n *network) dial(ctx context.Context, _, addr string) (net.Conn, error) {
	n.mu.Lock()
	l := n.listeners[addr]
	n.mu.Unlock()
	if l == nil {
		return nil, errNoHost
	}
	client, server := net.Pipe()
	select {
	case l.conns <- server:
		return client, nil
	case <-l.done:
		return nil, net.ErrClosed
	case <-ctx.Done():
		return nil, ctx.Err()
	}
}

// transport is the gateway's upstream transport over the network: the
// production settings, minus anything that waits on real time.
func (n *network) transport() *http.Transport {
	tr := dispatch.NewTransport()
	tr.Proxy = nil
	tr.DialContext = n.dial
	tr.ForceAttemptHTTP2 = false
	tr.IdleConnTimeout = 0
	tr.TLSHandshakeTimeout = 0
	tr.ExpectContinueTimeout = 0
	return tr
}

type pipeListener struct {
	addr  pipeAddr
	conns chan net.Conn
	once  sync.Once
	done  chan struct{}
}

func (l *pipeListener) Accept() (net.Conn, error) {
	select {
	case c := <-l.conns:
		return c, nil
	case <-l.done:
		return nil, net.ErrClosed
	}
}

func (l *pipeListener) Close() error {
	l.once.Do(func() { close(l.done) })
	return nil
}

func (l *pipeListener) Addr() net.Addr { return l.addr }

type pipeAddr string

func (a pipeAddr) Network() string { return "pipe" }
func (a pipeAddr) String() string  { return string(a) }
