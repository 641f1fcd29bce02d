package model

import (
	"encoding/binary"
	"fmt"
	"math"

	"google.golang.org/protobuf/encoding/protowire"
)

// Float16 tensors for the fp16 rewrite (fp16.go): TensorProtos read and
// written with protowire, float32 values rounded to IEEE 754 halves.

// typeNumber is the ONNX element type of a precog type name.
func typeNumber(name string) int32 {
	for n, s := range elemTypeNames {
		if s == name {
			return int32(n)
		}
	}
	return onnxUnknown
}

func tensorType(t []byte) int32 {
	_, typ, _ := tensorNameType(t)
	return typ
}

func tensorNameType(t []byte) (name string, typ int32, err error) {
	err = walk(t, func(f field) error {
		switch {
		case f.num == fTensorName && f.typ == protowire.BytesType:
			name = string(f.data)
		case f.num == fTensorDataType && f.typ == protowire.VarintType:
			typ = int32(f.v)
		}
		return nil
	})
	return name, typ, err
}

// tensorToFP16 re-encodes a float32 TensorProto as float16 (raw_data);
// any other tensor is returned as it is.
func tensorToFP16(t []byte) ([]byte, error) {
	if tensorType(t) != onnxFloat {
		return t, nil
	}
	var name string
	var dims []int64
	var vals []float32
	var raw []byte
	err := walk(t, func(f field) error {
		switch f.num {
		case fTensorName:
			name = string(f.data)
		case fTensorDims:
			if f.typ == protowire.BytesType { // packed
				for b := f.data; len(b) > 0; {
					v, n := protowire.ConsumeVarint(b)
					if n < 0 {
						return protowire.ParseError(n)
					}
					dims = append(dims, int64(v))
					b = b[n:]
				}
			} else {
				dims = append(dims, int64(f.v))
			}
		case fTensorFloatData:
			if f.typ == protowire.BytesType { // packed
				for b := f.data; len(b) >= 4; b = b[4:] {
					vals = append(vals, math.Float32frombits(binary.LittleEndian.Uint32(b)))
				}
			} else {
				vals = append(vals, math.Float32frombits(uint32(f.v)))
			}
		case fTensorRaw:
			raw = f.data
		case fTensorExternal, fTensorLocation:
			return fmt.Errorf("tensor %q: weights in external data do not convert to float16", name)
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	if raw != nil {
		vals = make([]float32, len(raw)/4)
		for i := range vals {
			vals[i] = math.Float32frombits(binary.LittleEndian.Uint32(raw[4*i:]))
		}
	}
	return fp16Tensor(name, dims, vals), nil
}

// fp16Tensor encodes a float16 TensorProto of vals.
func fp16Tensor(name string, dims []int64, vals []float32) []byte {
	var b []byte
	for _, d := range dims {
		b = appendVarint(b, fTensorDims, uint64(d))
	}
	b = appendVarint(b, fTensorDataType, onnxFloat16)
	if name != "" {
		b = appendStr(b, fTensorName, name)
	}
	raw := make([]byte, 2*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint16(raw[2*i:], float16Bits(v))
	}
	b = protowire.AppendTag(b, fTensorRaw, protowire.BytesType)
	return protowire.AppendBytes(b, raw)
}

// float16Bits rounds f to the nearest IEEE 754 half (ties to even),
// saturating finite values beyond its range at ±65504 as the float16
// converters do for weights; NaN stays NaN, ±Inf ±Inf.
func float16Bits(f float32) uint16 {
	bits := math.Float32bits(f)
	sign := uint16(bits>>16) & 0x8000
	exp := int32(bits>>23) & 0xff
	mant := bits & 0x7fffff
	switch {
	case exp == 0xff && mant != 0:
		return sign | 0x7e00 // NaN
	case exp == 0xff:
		return sign | 0x7c00 // Inf
	}
	e := exp - 127 + 15
	switch {
	case e >= 0x1f:
		return sign | 0x7bff // saturate at 65504
	case e <= 0:
		if e < -10 {
			return sign // underflows to zero
		}
		// Subnormal half: shift the mantissa (with its implicit 1) right.
		m := mant | 0x800000
		shift := uint32(14 - e)
		half := uint16(m >> shift)
		rem := m & (1<<shift - 1)
		mid := uint32(1) << (shift - 1)
		if rem > mid || (rem == mid && half&1 == 1) {
			half++
		}
		return sign | half
	}
	half := uint16(e)<<10 | uint16(mant>>13)
	rem := mant & 0x1fff
	if rem > 0x1000 || (rem == 0x1000 && half&1 == 1) {
		half++ // may carry into the exponent: still correct, up to Inf
		if half&0x7c00 == 0x7c00 {
			return sign | 0x7bff
		}
	}
	return sign | half
}
