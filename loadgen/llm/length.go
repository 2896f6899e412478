package llm

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"strconv"
)

// MaxLength bounds a token count, prompt or output.
const MaxLength = 1 << 20

// Length is a token count: a fixed number, or drawn per request from a
// distribution. In YAML or JSON it is a number (256), or one of
//
//	{dist: uniform, min: 100, max: 300}              # whole numbers from min to max
//	{dist: lognormal, median: 138, sigma: 0.8, max: 1024}  # optional min, default 1
//
// The zero Length is "not set".
type Length struct {
	Dist   string  `json:"dist,omitempty" yaml:"dist,omitempty"` // "" (fixed), "uniform" or "lognormal"
	N      int     `json:"-" yaml:"-"`                           // the fixed count
	Min    int     `json:"min,omitempty" yaml:"min,omitempty"`
	Max    int     `json:"max,omitempty" yaml:"max,omitempty"`
	Median float64 `json:"median,omitempty" yaml:"median,omitempty"`
	Sigma  float64 `json:"sigma,omitempty" yaml:"sigma,omitempty"`
}

// Fixed returns the Length n.
func Fixed(n int) Length { return Length{N: n} }

// IsZero reports whether l is unset.
func (l Length) IsZero() bool { return l == Length{} }

// lengthFields is Length's map form, for decoding.
type lengthFields struct {
	Dist   string  `json:"dist" yaml:"dist"`
	Min    int     `json:"min" yaml:"min"`
	Max    int     `json:"max" yaml:"max"`
	Median float64 `json:"median" yaml:"median"`
	Sigma  float64 `json:"sigma" yaml:"sigma"`
}

// UnmarshalYAML decodes a number or a distribution (goccy/go-yaml's
// InterfaceUnmarshaler; the decoder's strictness applies to the keys).
func (l *Length) UnmarshalYAML(unmarshal func(any) error) error {
	var n int
	if err := unmarshal(&n); err == nil {
		*l = Length{N: n}
		return l.validCount()
	}
	var f lengthFields
	if err := unmarshal(&f); err != nil {
		return fmt.Errorf("want a token count or {dist: uniform|lognormal, …}: %w", err)
	}
	*l = lengthOf(f)
	return l.Validate()
}

// UnmarshalJSON decodes a number or a distribution, strictly.
func (l *Length) UnmarshalJSON(b []byte) error {
	var n int
	if err := json.Unmarshal(b, &n); err == nil {
		*l = Length{N: n}
		return l.validCount()
	}
	var f lengthFields
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&f); err != nil {
		return fmt.Errorf("want a token count or {\"dist\": \"uniform\"|\"lognormal\", …}: %w", err)
	}
	*l = lengthOf(f)
	return l.Validate()
}

// MarshalJSON writes the form UnmarshalJSON reads.
func (l Length) MarshalJSON() ([]byte, error) {
	if l.Dist == "" {
		return []byte(strconv.Itoa(l.N)), nil
	}
	type plain Length
	return json.Marshal(plain(l))
}

func lengthOf(f lengthFields) Length {
	return Length{Dist: f.Dist, Min: f.Min, Max: f.Max, Median: f.Median, Sigma: f.Sigma}
}

// validCount checks a count given as a number: 0 is not "unset" there.
func (l Length) validCount() error {
	if l.N < 1 || l.N > MaxLength {
		return fmt.Errorf("%w: count %d: want 1 to %d", ErrLength, l.N, MaxLength)
	}
	return nil
}

// ErrLength is wrapped by Length's validation errors.
var ErrLength = errors.New("token length")

// Validate checks l's bounds (a zero Length is valid: unset).
func (l Length) Validate() error {
	bad := func(format string, args ...any) error {
		return fmt.Errorf("%w: %s", ErrLength, fmt.Sprintf(format, args...))
	}
	inRange := func(name string, v int) error {
		if v < 1 || v > MaxLength {
			return bad("%s %d: want 1 to %d", name, v, MaxLength)
		}
		return nil
	}
	switch l.Dist {
	case "":
		if l.IsZero() {
			return nil
		}
		if l.Min != 0 || l.Max != 0 || l.Median != 0 || l.Sigma != 0 {
			return bad("min, max, median and sigma need a dist")
		}
		return inRange("count", l.N)
	case "uniform":
		if l.Median != 0 || l.Sigma != 0 {
			return bad("uniform takes min and max, not median or sigma")
		}
		if err := inRange("min", l.Min); err != nil {
			return err
		}
		if err := inRange("max", l.Max); err != nil {
			return err
		}
		if l.Min > l.Max {
			return bad("min %d > max %d", l.Min, l.Max)
		}
	case "lognormal":
		if !(l.Median >= 1 && l.Median <= MaxLength) {
			return bad("lognormal median %v: want 1 to %d", l.Median, MaxLength)
		}
		if !(l.Sigma >= 0 && l.Sigma <= 4) {
			return bad("lognormal sigma %v: want 0 to 4", l.Sigma)
		}
		if err := inRange("max", l.Max); err != nil {
			return bad("lognormal needs a max (1 to %d)", MaxLength)
		}
		if l.Min != 0 {
			if err := inRange("min", l.Min); err != nil {
				return err
			}
			if l.Min > l.Max {
				return bad("min %d > max %d", l.Min, l.Max)
			}
		}
	default:
		return bad("dist %q: want uniform or lognormal", l.Dist)
	}
	return nil
}

// Draw returns a count from l (l must be valid and set).
func (l Length) Draw(r *rand.Rand) int {
	switch l.Dist {
	case "uniform":
		return l.Min + r.IntN(l.Max-l.Min+1)
	case "lognormal":
		v := int(math.Round(l.Median * math.Exp(l.Sigma*r.NormFloat64())))
		return min(max(v, l.Min, 1), l.Max)
	}
	return l.N
}

// Mean returns l's mean count (the lognormal's before its bounds).
func (l Length) Mean() float64 {
	switch l.Dist {
	case "uniform":
		return float64(l.Min+l.Max) / 2
	case "lognormal":
		return l.Median * math.Exp(l.Sigma*l.Sigma/2)
	}
	return float64(l.N)
}
