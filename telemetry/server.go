package telemetry

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
)

// shutdownGrace bounds how long Close waits for in-flight scrapes.
const shutdownGrace = 5 * time.Second

// ListenAddress normalises a --metrics-addr value. A bare port ("9464") or
// an address without a host (":9464") binds loopback, 127.0.0.1, so metrics
// are never exposed by accident; give a host ("0.0.0.0:9464") to expose
// them. Port 0 picks a free port.
func ListenAddress(addr string) (string, error) {
	addr = strings.TrimSpace(addr)
	if addr == "" {
		return "", errors.New("telemetry: metrics address is empty; give a port such as :9464 or host:port")
	}
	if !strings.Contains(addr, ":") {
		addr = ":" + addr
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return "", fmt.Errorf("telemetry: metrics address %q: %w; give :PORT, PORT or HOST:PORT", addr, err)
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return "", fmt.Errorf("telemetry: metrics address %q: port %q is not a number from 0 to 65535", addr, port)
	}
	if host == "" {
		host = "127.0.0.1"
	}
	return net.JoinHostPort(host, port), nil
}

// Server serves /metrics and /healthz until it is closed or the context
// given to Serve is done.
type Server struct {
	srv       *http.Server
	addr      net.Addr
	stopWatch func() bool   // stops the context watch
	served    chan struct{} // closed when srv.Serve has returned
	serveErr  error         // srv.Serve's error, other than ErrServerClosed
	once      sync.Once
	closeErr  error
}

// Serve listens on addr (normalised by ListenAddress) and serves g's metrics
// at /metrics and "ok" at /healthz in the background. It returns once the
// listener is bound, so Addr is valid at once. The server stops when ctx is
// done or Close or Shutdown is called; call one of them in any case so that
// no goroutine outlives it.
func Serve(ctx context.Context, addr string, g prometheus.Gatherer) (*Server, error) {
	hostPort, err := ListenAddress(addr)
	if err != nil {
		return nil, err
	}
	var lc net.ListenConfig
	ln, err := lc.Listen(ctx, "tcp", hostPort)
	if err != nil {
		return nil, fmt.Errorf("telemetry: metrics endpoint: %w", err)
	}

	mux := http.NewServeMux()
	mux.Handle("/metrics", promhttp.HandlerFor(g, promhttp.HandlerOpts{ErrorHandling: promhttp.ContinueOnError}))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
	})
	s := &Server{
		srv:    &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second},
		addr:   ln.Addr(),
		served: make(chan struct{}),
	}
	go func() {
		defer close(s.served)
		if err := s.srv.Serve(ln); !errors.Is(err, http.ErrServerClosed) {
			s.serveErr = err
		}
	}()
	s.stopWatch = context.AfterFunc(ctx, func() { _ = s.Close() })
	return s, nil
}

// Addr returns the address the server is bound to, with the actual port
// when 0 was asked for.
func (s *Server) Addr() string { return s.addr.String() }

// URL returns the http URL of the metrics endpoint.
func (s *Server) URL() string { return "http://" + s.Addr() + "/metrics" }

// Shutdown stops accepting scrapes and waits for those in flight until ctx
// is done, then closes what is left. It returns when the server's goroutine
// has ended. Calling it again returns the first result.
func (s *Server) Shutdown(ctx context.Context) error {
	s.once.Do(func() {
		s.stopWatch()
		err := s.srv.Shutdown(ctx)
		if err != nil {
			err = errors.Join(err, s.srv.Close())
		}
		<-s.served
		s.closeErr = errors.Join(err, s.serveErr)
		if s.closeErr != nil {
			s.closeErr = fmt.Errorf("telemetry: metrics endpoint: %w", s.closeErr)
		}
	})
	<-s.served
	return s.closeErr
}

// Close shuts the server down, giving in-flight scrapes a few seconds.
func (s *Server) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), shutdownGrace)
	defer cancel()
	return s.Shutdown(ctx)
}
