// Package telemetry turns the trainer's measurements into Prometheus metrics
// on a private registry, writes the JSON-lines events log, serves /metrics,
// and holds the one table of thresholds from which the alert rules and the
// dashboard thresholds are generated.
//
// The trainer reports through trainer.Observer and never imports this
// package; Metrics.Observer binds an Observer to one device and worker.
package telemetry
