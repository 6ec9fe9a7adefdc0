package trainer_test

import (
	"context"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/trainer"
)

// TestRaggedGraphEqualsEager: under ragged policy graph the short last
// batch (10 rows of 16) is captured once into a graph of its own and
// replayed in every epoch, with no fallback, and the run ends with the
// parameters of policy eager (which runs it eagerly) bit for bit; a
// second run of the same step in the process captures the short batch's
// graph, like the others, through the pool. A CNN's short batch too.
func TestRaggedGraphEqualsEager(t *testing.T) {
	for _, tc := range []struct {
		name string
		cfg  func(*testing.T) trainer.Config
	}{{"mlp", smallConfig}, {"cnn", cnnConfig}} {
		t.Run(tc.name, func(t *testing.T) {
			eagerCfg, graphCfg := tc.cfg(t), tc.cfg(t)
			eagerCfg.Ragged, graphCfg.Ragged = data.RaggedEager, data.RaggedGraph
			graphCfg.GraphPoolReuse = true
			eager := run(t, eagerCfg)
			dev, shared := openCPU(t), newShared(t)
			graph, err := trainer.Run(context.Background(), dev, shared, graphCfg)
			if err != nil {
				t.Fatal(err)
			}
			if graph.ParamsSHA256 != eager.ParamsSHA256 || graph.TestLoss != eager.TestLoss {
				t.Fatalf("policy graph: %s (test loss %v); policy eager: %s (%v)", graph.ParamsSHA256, graph.TestLoss, eager.ParamsSHA256, eager.TestLoss)
			}
			if len(graph.Fallbacks) != 0 || graph.EagerSteps != graphCfg.WarmupBatches {
				t.Fatalf("policy graph: fallbacks %v, %d eager steps; want none but the %d warm-up steps", graph.Fallbacks, graph.EagerSteps, graphCfg.WarmupBatches)
			}
			if graph.GraphReplays != eager.GraphReplays+graphCfg.Epochs {
				t.Fatalf("policy graph: %d replays, policy eager %d; want one more per epoch (%d)", graph.GraphReplays, eager.GraphReplays, graphCfg.Epochs)
			}
			// The short batch comes to the same input buffer every epoch
			// or alternates between the two: one or two graphs more.
			if extra := graph.Captures - eager.Captures; extra < 1 || extra > 2 || graph.CapturePooled != 0 {
				t.Fatalf("policy graph: %d captures (%d pooled), policy eager %d; want one or two more, none pooled", graph.Captures, graph.CapturePooled, eager.Captures)
			}
			again, err := trainer.Run(context.Background(), dev, shared, graphCfg)
			if err != nil {
				t.Fatal(err)
			}
			if again.Captures != graph.Captures || again.CapturePooled != again.Captures || again.ParamsSHA256 != graph.ParamsSHA256 {
				t.Fatalf("a second run in the process: %d of %d captures pooled (first run %d captures), params equal %v; want all pooled",
					again.CapturePooled, again.Captures, graph.Captures, again.ParamsSHA256 == graph.ParamsSHA256)
			}
		})
	}
}
