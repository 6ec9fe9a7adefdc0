package trainer

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/tolaria-ml/tolaria/data"
	"github.com/tolaria-ml/tolaria/internal/field"
	"github.com/tolaria-ml/tolaria/nn"
)

// savedCheckpoint writes a small checkpoint, with totals and training
// accumulators so the header has every field, and returns its path and
// what was saved.
func savedCheckpoint(t *testing.T) (path string, ck Checkpoint, params []float32, state [][]float32) {
	t.Helper()
	dir := t.TempDir()
	ck = Checkpoint{
		Model: "16-32-4 gelu cross-entropy", Optimizer: "adam lr=0.001", BatchSize: 16, Seed: 7,
		Dataset: "synthetic", TrainSize: 250, Shard: "0/1", Ragged: "pad", Epochs: 3, Step: 5,
		Totals: &Totals{Steps: 5, GraphReplays: 3, EagerSteps: 2, Fallbacks: map[string]int{"ragged_batch": 1},
			Captures: 1, CaptureSeconds: 0.25, EpochSeconds: []float64{1.5}, StageCopies: 5},
		TrainStats: []float64{2.5, 40, 80},
	}
	params = []float32{1, -2, 3.5, 0}
	state = [][]float32{{0.5, 0.25, 0, 1}, {9, 8, 7, 6}}
	if err := SaveCheckpoint(dir, ck, params, state); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, CheckpointFile), ck, params, state
}

func TestCheckpointRoundTrip(t *testing.T) {
	path, want, params, state := savedCheckpoint(t)
	got, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.params, params) || !reflect.DeepEqual(got.state, state) {
		t.Fatalf("params %v state %v, saved %v %v", got.params, got.state, params, state)
	}
	got.params, got.state = nil, nil
	want.Params, want.States = len(params), len(state)
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("header\n got %+v\nwant %+v", got, want)
	}
}

// TestEveryCheckpointByteIsVerified changes each byte of a checkpoint in
// turn, header and payload alike: every change is refused, and past the
// magic it is the checksum that refuses it.
func TestEveryCheckpointByteIsVerified(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := range orig {
		// Flipping the low bit turns a digit into another digit and a
		// letter into another letter: the header stays readable JSON
		// for most bytes, so only the checksum can notice.
		edited := append([]byte(nil), orig...)
		edited[i] ^= 0x01
		if err := os.WriteFile(path, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCheckpoint(path)
		if !errors.Is(err, ErrCheckpoint) {
			t.Fatalf("byte %d of %d changed (%q to %q): accepted (%v)", i, len(orig), orig[i], edited[i], err)
		}
		if i >= len(checkpointMagic) && !strings.Contains(err.Error(), "checksum mismatch") {
			t.Fatalf("byte %d of %d changed: refused for another reason than the checksum: %v", i, len(orig), err)
		}
		if !strings.Contains(err.Error(), path) {
			t.Fatalf("refusal does not name the file: %v", err)
		}
	}
}

// TestCutShortCheckpointIsSaidSo: a checkpoint cut short (an interrupted
// copy) is refused saying how long it is and how long it should be.
func TestCutShortCheckpointIsSaidSo(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	orig, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	cut := len(orig) - 40
	if err := os.WriteFile(path, orig[:cut], 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCheckpoint(path)
	if want := fmt.Sprintf("checksum mismatch, and the file is %d bytes where its header promises %d: it was cut short", cut, len(orig)); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), want) {
		t.Errorf("got %v\nwant %s ...", err, want)
	}
}

// TestCheckpointOfAnotherFormatIsRefused: a file of format v1, whose
// header had no checksum, is refused with its version named.
func TestCheckpointOfAnotherFormatIsRefused(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	raw, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		magic, want string
	}{
		{"TOLARIA-CKPT\x00v1\n", "format v1 is not read by this tolaria (it reads v2 and v3); format v1, from an earlier tolaria"},
		{"TOLARIA-CKPT\x00v4\n", "format v4 is not read by this tolaria (it reads v2 and v3); start a new run"},
		{"TOLARIA-CKPT\x00vX\n", "format v? is not read"},
		{"NOT-A-CHECKPOINT", "not a tolaria checkpoint"},
	} {
		edited := append([]byte(c.magic), raw[len(checkpointMagic):]...)
		if err := os.WriteFile(path, edited, 0o644); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCheckpoint(path)
		if !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("magic %q: %v, want a refusal saying %q", c.magic, err, c.want)
		}
	}
}

// TestCheckpointV2IsRead: a file of format v2, which an MLP run of an
// earlier tolaria wrote (v3 without the running state), is read as it
// was written; one whose header promises a running state is refused.
func TestCheckpointV2IsRead(t *testing.T) {
	params, state := []float32{1, 2, 3}, [][]float32{{4, 5, 6}}
	v2 := func(h Checkpoint) []byte {
		file, err := encodeCheckpoint(h, params, state)
		if err != nil {
			t.Fatal(err)
		}
		body := append([]byte(checkpointMagicV2), file[len(checkpointMagic):len(file)-checkpointDigestSize]...)
		sum := sha256.Sum256(body)
		return append(body, sum[:]...)
	}
	path := filepath.Join(t.TempDir(), CheckpointFile)
	if err := os.WriteFile(path, v2(Checkpoint{Model: "mlp", Step: 7}), 0o600); err != nil {
		t.Fatal(err)
	}
	ck, err := LoadCheckpoint(path)
	if err != nil {
		t.Fatal(err)
	}
	if ck.Step != 7 || !slices.Equal(ck.params, params) || !slices.Equal(ck.state[0], state[0]) || ck.Running != 0 || ck.running != nil {
		t.Errorf("read %+v", ck)
	}
	// A v3 file holds the running state after the optimizer state, bit
	// patterns included.
	running := []float32{0.5, math.Float32frombits(0x7fc00001), 2}
	if err := SaveCheckpoint(filepath.Dir(path), Checkpoint{Model: "net"}.WithRunning(running), params, state); err != nil {
		t.Fatal(err)
	}
	if ck, err = LoadCheckpoint(path); err != nil || ck.Running != 3 || math.Float32bits(ck.running[1]) != 0x7fc00001 || !slices.Equal(ck.state[0], state[0]) {
		t.Fatalf("v3 with a running state: %+v, %v", ck, err)
	}
	if err := os.WriteFile(path, v2(Checkpoint{Model: "net"}.WithRunning(running)), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadCheckpoint(path); !errors.Is(err, ErrCheckpoint) || !strings.Contains(err.Error(), "format v2 header promises 3 running-state values") {
		t.Errorf("v2 with a running state: %v", err)
	}
}

func TestCheckpointStateOfAnotherSizeIsNotSaved(t *testing.T) {
	err := SaveCheckpoint(t.TempDir(), Checkpoint{}, []float32{1, 2}, [][]float32{{1}})
	if err == nil || !strings.Contains(err.Error(), "optimizer state 0 holds 1 values for 2 parameters") {
		t.Fatalf("state shorter than the parameters: %v", err)
	}
}

// A checkpoint records a model described as layers by its canonical name,
// so resuming it with another architecture is refused by name.
func TestCheckpointNamesTheLayers(t *testing.T) {
	cnn := func(act nn.LayerSpec) Config {
		return Config{Spec: nn.Spec{Inputs: 784, Outputs: 10, Loss: nn.LossCrossEntropy}, Train: &data.Dataset{Name: "fashion-mnist"}, Net: nn.Net{
			Input: nn.Shape{1, 28, 28}, Loss: nn.LossCrossEntropy,
			Layers: []nn.LayerSpec{nn.Conv(8, 3).WithPadding(1), nn.BatchNorm(), act, nn.MaxPool(2), nn.Flatten(), nn.Linear(10)},
		}}
	}
	a, b := cnn(nn.ReLU()), cnn(nn.GELU())
	ha, hb := a.checkpointHeader(), b.checkpointHeader()
	if ha.Params != 80+16+14*14*8*10+10 {
		t.Errorf("header counts %d parameters", ha.Params)
	}
	if err := ha.matches(ha); err != nil {
		t.Fatal(err)
	}
	want := "it was written for model [1,28,28] conv(out=8,kernel=3,stride=1,padding=1) batchnorm(eps=1e-05,momentum=0.1) relu maxpool(kernel=2,stride=2,padding=0) flatten linear(out=10) cross_entropy " +
		"but this run has [1,28,28] conv(out=8,kernel=3,stride=1,padding=1) batchnorm(eps=1e-05,momentum=0.1) gelu maxpool(kernel=2,stride=2,padding=0) flatten linear(out=10) cross_entropy; " +
		"resume with the original settings or start a new run in another --run-dir"
	if err := ha.matches(hb); err == nil || err.Error() != want {
		t.Errorf("got %v\nwant %s", err, want)
	}
}

// TestCheckpointNamesTheOptimizerSettingThatDiffers: a resume with another
// learning rate is told that one setting, not the optimizer's every
// setting twice; another kind is told by its kind.
func TestCheckpointNamesTheOptimizerSettingThatDiffers(t *testing.T) {
	o := nn.Optimizer{Kind: "adamw", LR: 0.003, Beta1: 0.9, Beta2: 0.999, Eps: 1e-8, WeightDecay: 0.01}
	faster, sgd := o, o
	faster.LR, sgd.Kind = 0.01, "sgd"
	ck := Checkpoint{Model: "m", Optimizer: optimizerString(o)}
	for other, want := range map[nn.Optimizer]string{
		faster: "it was written for optimizer lr=0.003 but this run has lr=0.01;",
		sgd:    "it was written for optimizer adamw but this run has sgd;",
	} {
		w := ck
		w.Optimizer = optimizerString(other)
		if err := ck.matches(w); err == nil || !strings.HasPrefix(err.Error(), want) {
			t.Errorf("got %v\nwant %s ...", err, want)
		}
	}
}

// TestCheckpointRefusalSaysHowToGoOn: an empty file is called empty, not
// a file of another kind; a file that is not a checkpoint, or is damaged,
// is refused with advice for what it was read for. A run's own
// checkpoint (resume) has no earlier one beside it, so the run starts
// again in another run directory; a file read to score or sample from
// is given again, and nothing there speaks of resuming or of --run-dir.
func TestCheckpointRefusalSaysHowToGoOn(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name string
		raw  []byte
		says string
	}{
		{"empty", nil, "is empty (0 bytes)"},
		{"garbage", []byte("garbage\n"), "not a tolaria checkpoint"},
		{"damaged", whole[:len(whole)-1], "checksum mismatch"},
	} {
		if err := os.WriteFile(path, c.raw, 0o600); err != nil {
			t.Fatal(err)
		}
		for _, u := range []struct {
			use     checkpointUse
			advice  string
			neither []string
		}{
			{useResume, "start the run again in another --run-dir", []string{"bad magic", "point --run-dir at"}},
			{useRead, "", []string{"bad magic", "resume", "--run-dir"}},
		} {
			_, err := loadCheckpoint(path, u.use)
			if !errors.Is(err, ErrCheckpoint) {
				t.Fatalf("%s (use %d): %v, want a checkpoint refusal", c.name, u.use, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, c.says) || !strings.Contains(msg, u.advice) {
				t.Errorf("%s (use %d): %q\nwant it to say %q and %q", c.name, u.use, msg, c.says, u.advice)
			}
			for _, not := range u.neither {
				if strings.Contains(msg, not) {
					t.Errorf("%s (use %d): %q says %q", c.name, u.use, msg, not)
				}
			}
		}
	}
}

// TestShardRefusalNamesThePartThatChanged: a checkpoint of shard 0/2
// resumed as 1/2 is refused naming data.rank; as 0/4, data.world.
func TestShardRefusalNamesThePartThatChanged(t *testing.T) {
	h := Checkpoint{Shard: "0/2"}
	for want, key := range map[string]field.Name{"1/2": "data.rank", "0/4": "data.world", "1/4": "data.world"} {
		err := h.matches(Checkpoint{Shard: want})
		if !field.Is(err, key) || !strings.Contains(err.Error(), "shard (rank/world) 0/2 but this run has "+want) {
			t.Errorf("0/2 resumed as %s: %v; want a refusal of %s", want, err, key)
		}
	}
}

// TestUnreadCheckpointIsToldFromARefusedOne: a checkpoint that could not
// be read (here a directory in its place stands for EIO or a stale NFS
// handle), or is gone, is refused as ErrCheckpointUnread too, its message
// as before, so a caller can tell it from a refusal of the file's content,
// which never is.
func TestUnreadCheckpointIsToldFromARefusedOne(t *testing.T) {
	path, _, _, _ := savedCheckpoint(t)
	whole, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	other := slices.Clone(whole)
	other[len(checkpointMagicPrefix)] = '9'
	for _, c := range []struct {
		name string
		raw  []byte
	}{
		{"empty", nil},
		{"garbage", []byte("garbage\n")},
		{"damaged", whole[:len(whole)-1]},
		{"another format", other},
	} {
		if err := os.WriteFile(path, c.raw, 0o600); err != nil {
			t.Fatal(err)
		}
		_, err := LoadCheckpoint(path)
		if !errors.Is(err, ErrCheckpoint) || errors.Is(err, ErrCheckpointUnread) {
			t.Errorf("%s: %v, want a refusal of its content, not ErrCheckpointUnread", c.name, err)
		}
	}
	if err := os.Remove(path); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCheckpoint(path)
	if !errors.Is(err, ErrCheckpoint) || !errors.Is(err, ErrCheckpointUnread) || !strings.Contains(err.Error(), "no checkpoint to resume from") {
		t.Errorf("gone: %v, want ErrCheckpoint and ErrCheckpointUnread", err)
	}
	if err := os.Mkdir(path, 0o755); err != nil {
		t.Fatal(err)
	}
	_, err = LoadCheckpoint(path)
	if !errors.Is(err, ErrCheckpoint) || !errors.Is(err, ErrCheckpointUnread) || !strings.Contains(err.Error(), "checkpoint refused: "+path+": read ") {
		t.Errorf("unreadable: %v, want ErrCheckpoint and ErrCheckpointUnread, its message as before", err)
	}
}
