package telemetry

import (
	"bufio"
	"context"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

func TestListenAddress(t *testing.T) {
	tests := []struct {
		in, want string
		wantErr  bool
	}{
		{in: ":9464", want: "127.0.0.1:9464"},
		{in: "9464", want: "127.0.0.1:9464"},
		{in: " :0 ", want: "127.0.0.1:0"},
		{in: "0.0.0.0:9464", want: "0.0.0.0:9464"},
		{in: "localhost:9464", want: "localhost:9464"},
		{in: "[::1]:9464", want: "[::1]:9464"},
		{in: "", wantErr: true},
		{in: ":http", wantErr: true},
		{in: ":70000", wantErr: true},
		{in: "a:b:c", wantErr: true},
	}
	for _, tt := range tests {
		got, err := ListenAddress(tt.in)
		if (err != nil) != tt.wantErr || got != tt.want {
			t.Errorf("ListenAddress(%q) = %q, %v; want %q, error %v", tt.in, got, err, tt.want, tt.wantErr)
		}
	}
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(body)
}

// families returns the metric family names of a text exposition.
func families(body string) map[string]bool {
	names := map[string]bool{}
	sc := bufio.NewScanner(strings.NewReader(body))
	for sc.Scan() {
		if f := strings.Fields(sc.Text()); len(f) >= 3 && f[0] == "#" && f[1] == "TYPE" {
			names[f[2]] = true
		}
	}
	return names
}

func TestServeScrapesEveryMetric(t *testing.T) {
	m := NewMetrics("test")
	exercise(m.Observer("cpu", "0"))
	s, err := Serve(t.Context(), ":0", m.Registry())
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()

	host, port, err := net.SplitHostPort(s.Addr())
	if err != nil || host != "127.0.0.1" || port == "0" {
		t.Errorf("Addr() = %q; want 127.0.0.1 and the bound port", s.Addr())
	}
	code, body := get(t, s.URL())
	if code != http.StatusOK {
		t.Fatalf("GET /metrics: %d\n%s", code, body)
	}
	got := families(body)
	for _, name := range append(MetricNames(), "go_goroutines", "process_cpu_seconds_total") {
		if !got[name] {
			t.Errorf("/metrics lacks %s", name)
		}
	}
	if !strings.Contains(body, `tolaria_graph_fallback_total{device="cpu",reason="capture_failed",worker="0"} 0`) {
		t.Errorf("/metrics lacks the zero-initialised capture_failed fallback series")
	}
	if code, body := get(t, "http://"+s.Addr()+"/healthz"); code != http.StatusOK || body != "ok\n" {
		t.Errorf("GET /healthz = %d %q", code, body)
	}
	if err := s.Close(); err != nil {
		t.Errorf("Close: %v", err)
	}
	if err := s.Close(); err != nil {
		t.Errorf("second Close: %v", err)
	}
	if _, err := http.Get(s.URL()); err == nil {
		t.Errorf("GET after Close succeeded")
	}
}

func TestServeStopsWithContext(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	s, err := Serve(ctx, "127.0.0.1:0", NewMetrics("test").Registry())
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	deadline := time.Now().Add(5 * time.Second)
	for {
		conn, err := net.Dial("tcp", s.Addr())
		if err != nil {
			break
		}
		conn.Close()
		if time.Now().After(deadline) {
			t.Fatal("server still accepts connections 5s after its context was cancelled")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if err := s.Shutdown(context.Background()); err != nil {
		t.Errorf("Shutdown after cancel: %v", err)
	}
}

func TestServeErrors(t *testing.T) {
	reg := NewMetrics("test").Registry()
	if _, err := Serve(t.Context(), "", reg); err == nil {
		t.Error("Serve with an empty address succeeded")
	}
	s, err := Serve(t.Context(), ":0", reg)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := Serve(t.Context(), s.Addr(), reg); err == nil || !strings.Contains(err.Error(), "metrics endpoint") {
		t.Errorf("Serve on a busy port: %v, want an error naming the metrics endpoint", err)
	}
}
