package server

import (
	"bytes"
	"errors"
	"io"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// Limits are the host's settings that every service applies to its
// requests alike: the default deadline and the largest body. A service gets
// them from its Mount.
type Limits struct {
	// Timeout is a request's deadline from its arrival, unless its
	// X-Request-Timeout header asks for less.
	Timeout time.Duration
	// MaxBody is the largest request body read, in bytes.
	MaxBody int64
}

// RequestTimeout is r's deadline: l.Timeout, shortened by an
// X-Request-Timeout header holding a Go duration ("250ms") or seconds
// ("0.25"). A malformed or non-positive header is a 400 bad_timeout *Error
// that says why.
func (l Limits) RequestTimeout(r *http.Request) (time.Duration, error) {
	v := r.Header.Get("X-Request-Timeout")
	if v == "" {
		return l.Timeout, nil
	}
	d, err := time.ParseDuration(v)
	if err != nil {
		f, ferr := strconv.ParseFloat(v, 64)
		if ferr != nil {
			return 0, Errorf(http.StatusBadRequest, "bad_timeout", "X-Request-Timeout %q: want a duration like 250ms or seconds like 0.25", v)
		}
		d = time.Duration(f * float64(time.Second))
	}
	if d <= 0 {
		return 0, Errorf(http.StatusBadRequest, "bad_timeout", "X-Request-Timeout %q: must be positive", v)
	}
	return min(d, l.Timeout), nil
}

// Body is a request body read whole by ReadBody, in a pooled buffer.
type Body struct{ buf bytes.Buffer }

// Bytes returns the body. They are valid until Release.
func (b *Body) Bytes() []byte { return b.buf.Bytes() }

// Release returns the buffer to the pool: neither b nor its Bytes may be
// used after.
func (b *Body) Release() { bodyPool.Put(b) }

var bodyPool = sync.Pool{New: func() any { return new(Body) }}

// ReadBody reads r's whole body, at most l.MaxBody bytes, into a pooled
// buffer that the caller releases. Its errors are *Error: 413 body_too_large
// past the limit, 408 body_timeout when the body did not arrive within the
// host's read timeout, 400 bad_body when it ended early or broke; none
// quotes the network error, which names the server's and the client's
// addresses.
func (l Limits) ReadBody(r *http.Request) (*Body, error) {
	if r.ContentLength > l.MaxBody {
		return nil, tooLarge(l.MaxBody)
	}
	b := bodyPool.Get().(*Body)
	b.buf.Reset()
	_, err := b.buf.ReadFrom(io.LimitReader(r.Body, l.MaxBody+1))
	if err != nil {
		b.Release()
		return nil, bodyError(err)
	}
	if int64(b.buf.Len()) > l.MaxBody {
		b.Release()
		return nil, tooLarge(l.MaxBody)
	}
	return b, nil
}

func tooLarge(limit int64) *Error {
	return Errorf(http.StatusRequestEntityTooLarge, "body_too_large", "request body exceeds %d bytes", limit)
}

// bodyError is the answer to a body that could not be read.
func bodyError(err error) *Error {
	var ne net.Error
	switch {
	case errors.As(err, &ne) && ne.Timeout():
		return Errorf(http.StatusRequestTimeout, "body_timeout", "the body did not arrive in time")
	case errors.Is(err, io.ErrUnexpectedEOF):
		return Errorf(http.StatusBadRequest, "bad_body", "the body ended early")
	default:
		return Errorf(http.StatusBadRequest, "bad_body", "the body could not be read (malformed chunked encoding, or the connection broke)")
	}
}

// AppendTiming appends the start of a Server-Timing header value to b: two
// durations, in milliseconds to the microsecond, and the size of the batch,
// "queue;dur=1.250, compute;dur=3.000, batch;desc=8". Every service's
// answers begin so.
func AppendTiming(b []byte, name1 string, d1 time.Duration, name2 string, d2 time.Duration, batch int) []byte {
	b = append(b, name1...)
	b = append(b, ";dur="...)
	b = strconv.AppendFloat(b, float64(d1.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", "...)
	b = append(b, name2...)
	b = append(b, ";dur="...)
	b = strconv.AppendFloat(b, float64(d2.Microseconds())/1000, 'f', 3, 64)
	b = append(b, ", batch;desc="...)
	return strconv.AppendInt(b, int64(batch), 10)
}
