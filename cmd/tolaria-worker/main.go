// Command tolaria-worker owns one device for the coordinator. Built with
// -tags cuda it opens NVIDIA GPUs through device/cuda (and so initialises
// CUDA at start, exiting when there is no GPU or driver); built without it
// serves the CPU device only. It speaks the worker protocol on standard
// input and output and logs to standard error.
//
//	tolaria-worker serve              answer one request (a probe or a job) on stdin/stdout
//	tolaria-worker serve --keep       answer requests one after another until stdin ends,
//	                                  keeping the device and its graph pool between jobs
//	                                  (a sweep's --reuse-workers; see jobserver.ServeKept)
//	tolaria-worker serve --spool DIR  answer it through the spool files in DIR (a
//	                                  scheduler's task on another node; see worker.SpoolIn)
//	tolaria-worker info               print how the worker was built and what its device's
//	                                  streams and context take (a CUDA build opens GPU 0)
//	tolaria-worker devices            print the GPUs the driver reports, as JSON
package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/signal"
	"strconv"
	"syscall"

	"github.com/tolaria-ml/tolaria/device"
	"github.com/tolaria-ml/tolaria/job"
	"github.com/tolaria-ml/tolaria/jobserver"
	"github.com/tolaria-ml/tolaria/trainer"
	"github.com/tolaria-ml/tolaria/worker"
)

func main() {
	spool, keep := "", false
	if len(os.Args) == 4 && os.Args[1] == "serve" && os.Args[2] == "--spool" && os.Args[3] != "" {
		spool = os.Args[3]
	} else if len(os.Args) == 3 && os.Args[1] == "serve" && os.Args[2] == worker.KeepArg {
		keep = true
	} else if len(os.Args) != 2 || (os.Args[1] != "serve" && os.Args[1] != "info" && os.Args[1] != "devices") {
		fmt.Fprintln(os.Stderr, "usage: tolaria-worker serve [--spool DIR | --keep] | info | devices (started by tolaria, which speaks to it on stdin/stdout, or through the spool files in DIR)")
		os.Exit(2)
	}
	if os.Args[1] == "devices" {
		os.Exit(printDevices())
	}
	if os.Args[1] == "info" {
		// stream_scratch_bytes: the device memory each stream of this
		// build's device holds besides its work; context_bytes: what
		// opening the device took (GPU 0: its context and modules), which
		// a worker measures the same way and bills. Both are in every
		// budget request's bill.
		ctx, err := contextBytes()
		if err != nil {
			fmt.Fprintln(os.Stderr, "tolaria-worker info: opening the device to measure its context:", err)
			os.Exit(1)
		}
		fmt.Printf("tolaria-worker build=%s stream_scratch_bytes=%d context_bytes=%d\n", build, streamScratchBytes(), ctx)
		return
	}
	// The coordinator cancels through the protocol; a signal to the worker
	// itself (kill, or Ctrl-C when it runs by hand; tolaria starts it in a
	// process group of its own) is treated the same way.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	log := slog.New(slog.NewTextHandler(os.Stderr, nil)).With("worker_pid", os.Getpid())
	// The process's state: a worker serves one request (or, kept, one
	// job after another), and the pool, the capture guard and the busy
	// devices are the process's, made here and passed down.
	shared := trainer.NewShared()
	defer shared.Close()
	cfg := jobserver.Config{Build: build, Open: open, Shared: shared, Logger: log, Devices: listGPUs}
	if err := installFaults(&cfg, log); err != nil {
		log.Error("test-only fault switch", "err", err)
		os.Exit(2)
	}
	var in io.Reader = os.Stdin
	var out io.Writer = protocolOut()
	if spool != "" {
		sin, sout, err := worker.OpenSpool(spool)
		if err != nil {
			log.Error("worker failed", "err", err)
			os.Exit(1)
		}
		defer sin.Close()
		defer sout.Close()
		in, out = sin, sout
		log.Info("serving through the spool", "dir", spool)
	}
	serve := jobserver.Serve
	if keep {
		serve = jobserver.ServeKept
	}
	err := serve(ctx, in, out, cfg)
	if err != nil {
		log.Error("worker failed", "err", err)
		os.Exit(1)
	}
}

// protocolOut is where the protocol's answers go: the descriptor the
// coordinator named in TOLARIA_PROTOCOL_FD, else standard output (for use
// by hand).
func protocolOut() *os.File {
	fd, err := strconv.Atoi(os.Getenv(worker.ProtocolFDEnv))
	if err != nil || fd < 3 {
		return os.Stdout
	}
	return os.NewFile(uintptr(fd), "protocol")
}

// open opens the device a request names.
func open(name string, spec job.Spec) (device.Device, error) {
	if name == "cuda" {
		return openCUDA(spec)
	}
	return jobserver.OpenCPU(name, spec)
}

// printDevices prints the GPUs the driver reports as one JSON object
// ({"gpus": [...]}, what a devices request answers), or says why there are
// none: exit 1.
func printDevices() int {
	if listGPUs == nil {
		fmt.Fprintln(os.Stderr, "tolaria-worker: built without CUDA, so it sees no GPU; build it with `make worker-cuda` (go build -tags cuda)")
		return 1
	}
	gpus, err := listGPUs()
	if err != nil {
		fmt.Fprintln(os.Stderr, "tolaria-worker:", err)
		return 1
	}
	if gpus == nil {
		gpus = []jobserver.GPU{}
	}
	enc := json.NewEncoder(os.Stdout)
	enc.SetIndent("", "  ")
	if err := enc.Encode(jobserver.DevicesResult{GPUs: gpus}); err != nil {
		fmt.Fprintln(os.Stderr, "tolaria-worker:", err)
		return 1
	}
	return 0
}
