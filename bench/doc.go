// Package bench measures what CUDA-graph capture and replay buy for a
// training step, as the library behind cmd/run_graph_bench. It drives the
// same parts the trainer does (a model, a workspace leased from a shared
// graphs.Pool, a staging pipeline, a compute stream) on any device.Device,
// runs the step eagerly and replayed from a graph in the same steady-state
// pipelined loop, and reports wall-clock, device-event and host-CPU times
// per step, capture times cold and pooled, and the cost of one launch.
// It computes the report and writes it as JSON; run_graph_bench prints and
// draws it, so nothing that runs the bench in a worker links a plotting
// library.
//
// docs/bench.md says what each number means and how it is measured.
package bench
