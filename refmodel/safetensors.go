package refmodel

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"sort"
)

// tensor is one float64 tensor of a safetensors file.
type tensor struct {
	name  string
	shape []int
	data  []float64
}

type tensorHeader struct {
	DType       string `json:"dtype"`
	Shape       []int  `json:"shape"`
	DataOffsets [2]int `json:"data_offsets"`
}

// maxHeader bounds the JSON header a file may declare.
const maxHeader = 1 << 20

// encodeSafetensors lays tensors out in the safetensors format: an 8-byte
// little-endian header length, a JSON header padded with spaces to a multiple
// of 8, then the tensors' little-endian bytes.
func encodeSafetensors(ts []tensor) []byte {
	header := make(map[string]any, len(ts)+1)
	header["__metadata__"] = map[string]string{"format": "pt"}
	off := 0
	for _, t := range ts {
		n := 8 * len(t.data)
		header[t.name] = tensorHeader{DType: "F64", Shape: t.shape, DataOffsets: [2]int{off, off + n}}
		off += n
	}
	h, _ := json.Marshal(header)
	for len(h)%8 != 0 {
		h = append(h, ' ')
	}
	out := make([]byte, 8, 8+len(h)+off)
	binary.LittleEndian.PutUint64(out, uint64(len(h)))
	out = append(out, h...)
	for _, t := range ts {
		for _, v := range t.data {
			out = binary.LittleEndian.AppendUint64(out, math.Float64bits(v))
		}
	}
	return out
}

// decodeSafetensors reads a file written by encodeSafetensors. Only F64
// tensors are accepted; offsets must tile the data section exactly.
func decodeSafetensors(b []byte) (map[string]tensor, error) {
	if len(b) < 8 {
		return nil, errors.New("truncated: no header length")
	}
	n := binary.LittleEndian.Uint64(b)
	if n > maxHeader || n > uint64(len(b)-8) {
		return nil, fmt.Errorf("header length %d does not fit a %d-byte file", n, len(b))
	}
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b[8:8+n], &raw); err != nil {
		return nil, fmt.Errorf("header: %w", err)
	}
	data := b[8+n:]
	out := make(map[string]tensor, len(raw))
	spans := make([][2]int, 0, len(raw))
	for name, r := range raw {
		if name == "__metadata__" {
			continue
		}
		var h tensorHeader
		if err := json.Unmarshal(r, &h); err != nil {
			return nil, fmt.Errorf("tensor %s: %w", name, err)
		}
		if h.DType != "F64" {
			return nil, fmt.Errorf("tensor %s: dtype %s, want F64", name, h.DType)
		}
		count := 1
		for _, d := range h.Shape {
			if d < 0 || d > maxHeader {
				return nil, fmt.Errorf("tensor %s: bad shape %v", name, h.Shape)
			}
			count *= d
		}
		lo, hi := h.DataOffsets[0], h.DataOffsets[1]
		if lo < 0 || hi < lo || hi > len(data) || hi-lo != 8*count {
			return nil, fmt.Errorf("tensor %s: data offsets %v do not fit shape %v in %d data bytes", name, h.DataOffsets, h.Shape, len(data))
		}
		vals := make([]float64, count)
		for i := range vals {
			vals[i] = math.Float64frombits(binary.LittleEndian.Uint64(data[lo+8*i:]))
		}
		out[name] = tensor{name: name, shape: h.Shape, data: vals}
		spans = append(spans, h.DataOffsets)
	}
	sort.Slice(spans, func(i, j int) bool { return spans[i][0] < spans[j][0] })
	end := 0
	for _, s := range spans {
		if s[0] != end {
			return nil, errors.New("tensor data overlaps or leaves gaps")
		}
		end = s[1]
	}
	if end != len(data) {
		return nil, fmt.Errorf("%d trailing bytes after the tensors", len(data)-end)
	}
	return out, nil
}
