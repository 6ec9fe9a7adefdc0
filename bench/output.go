package bench

import (
	"encoding/json"
	"io"
	"math"
	"reflect"
)

// WriteJSON writes the report as indented JSON, with every number rounded
// to 6 significant digits: more would be noise.
func WriteJSON(w io.Writer, rep *Report) error { return writeRounded(w, rep) }

// WritePeerJSON writes a side-by-side report the way WriteJSON writes a
// report.
func WritePeerJSON(w io.Writer, rep *PeerReport) error { return writeRounded(w, rep) }

func writeRounded[T any](w io.Writer, rep *T) error {
	// Round a copy, so the caller's report keeps full precision.
	b, err := json.Marshal(rep)
	if err != nil {
		return err
	}
	var c T
	if err := json.Unmarshal(b, &c); err != nil {
		return err
	}
	roundFloats(reflect.ValueOf(&c).Elem())
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(&c)
}

func roundFloats(v reflect.Value) {
	switch v.Kind() {
	case reflect.Float64:
		v.SetFloat(roundSig(v.Float(), 6))
	case reflect.Pointer:
		if !v.IsNil() {
			roundFloats(v.Elem())
		}
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				roundFloats(v.Field(i))
			}
		}
	case reflect.Slice:
		for i := range v.Len() {
			roundFloats(v.Index(i))
		}
	}
}

// roundSig rounds x to n significant digits.
func roundSig(x float64, n int) float64 {
	if x == 0 || math.IsNaN(x) || math.IsInf(x, 0) {
		return x
	}
	p := math.Pow(10, float64(n)-math.Ceil(math.Log10(math.Abs(x))))
	return math.Round(x*p) / p
}
