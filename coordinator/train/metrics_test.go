package train

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/tolaria-ml/tolaria/coordinator/refusal"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/telemetry"
	"github.com/tolaria-ml/tolaria/trainer"
)

func TestNoMetricsAddressServesNothing(t *testing.T) {
	m, err := ServeMetrics(context.Background(), "", "test", nil)
	if err != nil || m.URL() != "" {
		t.Fatalf("ServeMetrics(\"\"): %q, %v", m.URL(), err)
	}
	start := time.Now()
	m.Linger(context.Background(), time.Hour)
	if time.Since(start) > time.Second {
		t.Fatal("Linger without a server waited")
	}
	var events bytes.Buffer
	m.Observer(&events, telemetry.Series{Device: "cpu", Worker: "0"}).Observe(trainer.Event{Time: time.Now(), Kind: trainer.EventStart})
	if !strings.Contains(events.String(), `"kind":"start"`) {
		t.Fatalf("events log: %q", events.String())
	}
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
}

func TestBusyMetricsPortIsASetupError(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	_, err = ServeMetrics(context.Background(), l.Addr().String(), "test", nil)
	if !errors.Is(err, refusal.ErrSetup) || errors.Is(err, refusal.ErrConfig) || !field.Is(err, "metrics_addr") {
		t.Fatalf("busy port: %v", err)
	}
}

func TestMetricsServeUntilClosedAndLingerStopsOnCancel(t *testing.T) {
	m, err := ServeMetrics(context.Background(), "127.0.0.1:0", "test", nil)
	if err != nil {
		t.Fatal(err)
	}
	var events bytes.Buffer
	m.Observer(&events, telemetry.Series{Device: "cpu", Worker: "0"}).Observe(trainer.Epoch{Epoch: 3})
	body := get(t, m.URL())
	if !strings.Contains(body, "tolaria_") {
		t.Fatalf("/metrics serves no tolaria metrics:\n%.500s", body)
	}

	start := time.Now()
	m.Linger(context.Background(), 50*time.Millisecond)
	if d := time.Since(start); d < 50*time.Millisecond {
		t.Fatalf("Linger returned after %s, want 50ms", d)
	}
	ctx, cancel := context.WithCancel(context.Background())
	time.AfterFunc(50*time.Millisecond, cancel)
	start = time.Now()
	m.Linger(ctx, time.Hour)
	if d := time.Since(start); d > 10*time.Second {
		t.Fatalf("a cancelled Linger took %s", d)
	}
	get(t, m.URL()) // still up until Close

	url := m.URL()
	if err := m.Close(); err != nil {
		t.Fatal(err)
	}
	if resp, err := http.Get(url); err == nil {
		resp.Body.Close()
		t.Fatal("/metrics still answers after Close")
	}
}

func get(t *testing.T, url string) string {
	t.Helper()
	client := &http.Client{Timeout: 10 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("GET %s: %d, %v", url, resp.StatusCode, err)
	}
	return string(raw)
}
