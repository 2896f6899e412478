package server

import (
	"errors"
	"net/http"
	"testing"
	"time"
)

// The host's fuzz target: the X-Request-Timeout header every service reads.
// Seeds are in testdata/fuzz/<target>; `make fuzz` runs it for a while.

func FuzzRequestTimeout(f *testing.F) {
	for _, v := range []string{"", "250ms", "0.25", "1h", "-1s", "0", "NaN", "1e300", "9223372036s", "soon"} {
		f.Add(v)
	}
	l := Limits{Timeout: 30 * time.Second}
	f.Fuzz(func(t *testing.T, v string) {
		r := &http.Request{Header: http.Header{}}
		if v != "" {
			r.Header.Set("X-Request-Timeout", v)
		}
		d, err := l.RequestTimeout(r)
		if err != nil {
			var e *Error
			if !errors.As(err, &e) || e.Status != http.StatusBadRequest || e.Code != "bad_timeout" || e.Message == "" {
				t.Fatalf("%q: error %v, want a 400 bad_timeout *Error with a message", v, err)
			}
			return
		}
		if d <= 0 || d > l.Timeout {
			t.Fatalf("X-Request-Timeout %q = %v, want in (0, %v]", v, d, l.Timeout)
		}
		// Round trip: the duration written as Go writes it reads back.
		r.Header.Set("X-Request-Timeout", d.String())
		if again, err := l.RequestTimeout(r); err != nil || again != d {
			t.Fatalf("round trip of %v: %v, %v", d, again, err)
		}
	})
}
