package llm

import (
	"bytes"
	"errors"
	"io"
	"strconv"
	"time"
)

// Event is one dispatched server-sent event. Its slices belong to the
// Reader and stay valid until the next call to Next.
type Event struct {
	// Type is the event's "event" field; empty means "message".
	Type []byte
	// Data is the event's data lines joined by LF.
	Data []byte
	// ID is the last event ID buffer when the event was dispatched: the
	// latest "id" field of the stream so far, not only of this event.
	ID []byte
}

// SSE parsing errors.
var (
	// ErrEventTooLarge: a line or an event's data exceeded the reader's
	// bound.
	ErrEventTooLarge = errors.New("sse: event too large")
	// ErrIncompleteEvent: the stream ended inside an event (data lines
	// without the blank line that dispatches them). As the specification
	// says, the event is discarded; Reader.Pending returns its data.
	ErrIncompleteEvent = errors.New("sse: stream ended inside an event")
)

// DefaultMaxEvent bounds a line and an event's data when Reader.Max is 0.
const DefaultMaxEvent = 1 << 20

const readChunk = 4 << 10

// Reader parses a text/event-stream as the WHATWG HTML specification's
// "event stream interpretation" says: lines end with CRLF, LF or CR; a
// leading byte-order mark is skipped; a line starting with a colon is a
// comment; "field: value" loses one space after the colon, if any, and a
// line without a colon is a field with an empty value; "data" lines are
// joined by LF; "event" sets the type, "id" the last event ID (unless it
// holds a NUL), "retry" the reconnection time (digits only); other fields
// are ignored (see OnField); a blank line dispatches the event, unless it
// has no data line.
//
// A Reader allocates only while its buffers grow to the largest line and
// event seen: steady-state parsing is allocation-free. The zero value is
// not usable; make one with NewReader, or Reset a pooled one.
type Reader struct {
	// Max bounds a line and an event's data, in bytes; 0 means
	// DefaultMaxEvent.
	Max int
	// OnField, if set, is called with the fields the specification
	// ignores (any name but data, event, id and retry), for servers that
	// stray from it: llama.cpp sends "error: {…}" lines, which a
	// compliant parser drops. The slices are valid during the call only.
	OnField func(name, value []byte)

	r          io.Reader
	buf        []byte // read buffer; unread bytes are buf[start:end]
	start, end int
	scanned    int   // unread bytes known to hold no line end
	err        error // sticky read error

	data       []byte // the event being built
	hasData    bool   // a data field was seen since the last dispatch
	typ        []byte
	id         []byte
	retry      time.Duration
	started    bool   // the BOM check is done
	afterCR    bool   // the last line ended in CR: a leading LF is its pair
	partial    []byte // an unterminated last line, at the end of the stream
	pending    []byte // the data of an event cut off by the end
	dispatched bool   // data and typ belong to the event last returned
}

// NewReader returns a Reader of r.
func NewReader(r io.Reader) *Reader {
	sr := &Reader{}
	sr.Reset(r)
	return sr
}

// Reset makes the Reader read r from scratch, keeping its buffers.
func (sr *Reader) Reset(r io.Reader) {
	*sr = Reader{
		Max: sr.Max, OnField: sr.OnField,
		r: r, buf: sr.buf[:0], data: sr.data[:0], typ: sr.typ[:0], id: sr.id[:0], pending: sr.pending[:0],
		retry: -1,
	}
}

// Retry returns the latest valid "retry" field, or -1 if none came.
func (sr *Reader) Retry() time.Duration { return sr.retry }

// Pending returns the data of the event discarded at the end of the
// stream, after Next returned ErrIncompleteEvent.
func (sr *Reader) Pending() []byte { return sr.pending }

func (sr *Reader) max() int {
	if sr.Max > 0 {
		return sr.Max
	}
	return DefaultMaxEvent
}

// Next returns the next event. At the end of the stream it returns io.EOF,
// or ErrIncompleteEvent if the stream ended inside an event; a read error
// is returned as is.
func (sr *Reader) Next() (Event, error) {
	if sr.dispatched {
		// The previous event's buffers are reused only now, so that it
		// stayed valid until this call.
		sr.data, sr.typ = sr.data[:0], sr.typ[:0]
		sr.dispatched = false
	}
	for {
		line, err := sr.line()
		if err != nil {
			if err == io.EOF {
				if len(sr.partial) > 0 {
					// An unterminated last line: interpret it as the
					// line it would have been, to report what is lost.
					_ = sr.field(sr.partial)
					sr.partial = nil
				}
				if sr.hasData {
					sr.pending = append(sr.pending[:0], sr.data...)
					sr.hasData = false
					return Event{}, ErrIncompleteEvent
				}
			}
			return Event{}, err
		}
		if len(line) == 0 {
			if !sr.hasData {
				sr.typ = sr.typ[:0]
				continue
			}
			sr.hasData = false
			sr.dispatched = true
			return Event{Type: sr.typ, Data: sr.data, ID: sr.id}, nil
		}
		if err := sr.field(line); err != nil {
			return Event{}, err
		}
	}
}

// field interprets one non-blank line.
func (sr *Reader) field(line []byte) error {
	if line[0] == ':' {
		return nil // comment
	}
	name, value := line, []byte(nil)
	if i := bytes.IndexByte(line, ':'); i >= 0 {
		name, value = line[:i], line[i+1:]
		if len(value) > 0 && value[0] == ' ' {
			value = value[1:]
		}
	}
	switch string(name) { // no allocation: the compiler compares in place
	case "data":
		if sr.hasData {
			if len(sr.data)+1+len(value) > sr.max() {
				return ErrEventTooLarge
			}
			sr.data = append(sr.data, '\n')
		}
		sr.data = append(sr.data, value...)
		sr.hasData = true
	case "event":
		sr.typ = append(sr.typ[:0], value...)
	case "id":
		if bytes.IndexByte(value, 0) < 0 {
			sr.id = append(sr.id[:0], value...)
		}
	case "retry":
		if ms, ok := digits(value); ok {
			sr.retry = time.Duration(ms) * time.Millisecond
		}
	default:
		if sr.OnField != nil {
			sr.OnField(name, value)
		}
	}
	return nil
}

// digits parses a non-empty run of ASCII digits, saturating.
func digits(b []byte) (int64, bool) {
	if len(b) == 0 {
		return 0, false
	}
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
	}
	n, err := strconv.ParseInt(string(b), 10, 64)
	if err != nil || n > int64(time.Duration(1<<62)/time.Millisecond) {
		n = int64(time.Duration(1<<62) / time.Millisecond)
	}
	return n, true
}

// line returns the next line without its terminator. The slice aliases
// the read buffer and is valid until the next call. At the end of the
// stream, an unterminated last line is left in sr.partial.
func (sr *Reader) line() ([]byte, error) {
	for {
		if sr.afterCR && sr.start < sr.end {
			if sr.buf[sr.start] == '\n' {
				sr.start++
			}
			sr.afterCR = false
		}
		unread := sr.buf[sr.start:sr.end]
		if !sr.started {
			n := min(len(unread), len(bom))
			switch {
			case !bytes.Equal(unread[:n], bom[:n]):
				sr.started = true
			case n == len(bom):
				sr.start += n
				unread = unread[n:]
				sr.started = true
			case sr.err != nil:
				sr.started = true
			}
		}
		if sr.started {
			// Scan only the bytes not scanned yet: a long line read in
			// small pieces stays linear.
			if i := lineEnd(unread[sr.scanned:]); i >= 0 {
				i += sr.scanned
				sr.scanned = 0
				if i > sr.max() {
					return nil, ErrEventTooLarge
				}
				sr.start += i + 1
				sr.afterCR = unread[i] == '\r'
				return unread[:i], nil
			}
			sr.scanned = len(unread)
			if sr.err != nil {
				sr.partial = unread
				sr.start, sr.scanned = sr.end, 0
				return nil, sr.err
			}
			if len(unread) > sr.max() {
				return nil, ErrEventTooLarge
			}
		}
		sr.fill()
	}
}

var bom = []byte{0xEF, 0xBB, 0xBF}

// lineEnd returns the index of the first CR or LF in b, or -1.
func lineEnd(b []byte) int {
	lf := bytes.IndexByte(b, '\n')
	if lf < 0 {
		return bytes.IndexByte(b, '\r')
	}
	if cr := bytes.IndexByte(b[:lf], '\r'); cr >= 0 {
		return cr
	}
	return lf
}

// fill reads more bytes, first moving the unread ones to the front, and
// growing the buffer when they fill it.
func (sr *Reader) fill() {
	if sr.start > 0 {
		n := copy(sr.buf[:cap(sr.buf)], sr.buf[sr.start:sr.end])
		sr.start, sr.end = 0, n
	}
	if sr.end == cap(sr.buf) {
		grown := make([]byte, max(readChunk, 2*cap(sr.buf)))
		copy(grown, sr.buf[:sr.end])
		sr.buf = grown
	}
	sr.buf = sr.buf[:cap(sr.buf)]
	n, err := sr.r.Read(sr.buf[sr.end:])
	if n == 0 && err == nil {
		// io.Reader discourages 0, nil; retry once, as bufio does, then
		// give up rather than spin.
		n, err = sr.r.Read(sr.buf[sr.end:])
		if n == 0 && err == nil {
			err = io.ErrNoProgress
		}
	}
	sr.end += n
	sr.err = err
}

// Encoding writes events as a server would; its options reproduce the
// wire quirks of real servers, all of them valid SSE.
type Encoding struct {
	// NoSpace writes "data:x" instead of "data: x" (TGI's way). A value
	// that itself begins with a space still gets one after the colon, or
	// the reader would drop it.
	NoSpace bool
	// EOL is the line terminator: "\n" (the default), "\r\n" or "\r".
	EOL string
}

// AppendEvent appends ev: its type and ID when set, then one data line per
// LF-separated line of Data, then the blank line. A CR in Data would end a
// line, so it is written as a line break (read back as LF).
func (e Encoding) AppendEvent(dst []byte, ev Event) []byte {
	if len(ev.Type) > 0 {
		dst = e.appendField(dst, "event", ev.Type)
	}
	if len(ev.ID) > 0 {
		dst = e.appendField(dst, "id", ev.ID)
	}
	data := ev.Data
	for {
		i := lineEnd(data)
		if i < 0 {
			dst = e.appendField(dst, "data", data)
			break
		}
		dst = e.appendField(dst, "data", data[:i])
		if data[i] == '\r' && i+1 < len(data) && data[i+1] == '\n' {
			i++
		}
		data = data[i+1:]
	}
	return append(dst, e.eol()...)
}

// AppendComment appends a comment line (a keep-alive, when text is empty).
func (e Encoding) AppendComment(dst []byte, text string) []byte {
	dst = append(dst, ':')
	if text != "" {
		dst = append(dst, ' ')
		dst = append(dst, text...)
	}
	return append(dst, e.eol()...)
}

// AppendRetry appends a retry field, in milliseconds.
func (e Encoding) AppendRetry(dst []byte, d time.Duration) []byte {
	return e.appendField(dst, "retry", strconv.AppendInt(nil, d.Milliseconds(), 10))
}

func (e Encoding) appendField(dst []byte, name string, value []byte) []byte {
	dst = append(dst, name...)
	dst = append(dst, ':')
	if !e.NoSpace || (len(value) > 0 && value[0] == ' ') {
		dst = append(dst, ' ')
	}
	dst = append(dst, value...)
	return append(dst, e.eol()...)
}

func (e Encoding) eol() string {
	if e.EOL == "" {
		return "\n"
	}
	return e.EOL
}
