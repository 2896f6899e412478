package encoder

import (
	"context"
	"errors"
	"math"
	"net/http"
	"time"

	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

// toAPIError maps any error from decoding, admission or the model to its
// answer. This function is the one place where the encoder's errors become
// status codes.
func (s *Service) toAPIError(err error) *server.Error {
	var ae *server.Error
	var items *batch.ItemsError
	switch {
	case errors.As(err, &ae):
		return ae
	case errors.Is(err, models.ErrInputTooLong):
		return server.Errorf(http.StatusRequestEntityTooLarge, "input_too_long", "%v", err)
	case errors.Is(err, models.ErrInvalidInput):
		return server.Errorf(http.StatusUnprocessableEntity, "invalid_input", "%v", err)
	case errors.Is(err, batch.ErrWouldMissDeadline):
		e := server.Errorf(http.StatusTooManyRequests, "deadline_unreachable", "the backlog would outlast this request's deadline; retry later")
		e.RetryAfter = s.retryAfter()
		return e
	case errors.Is(err, batch.ErrQueueFull):
		e := server.Errorf(http.StatusTooManyRequests, "queue_full", "server is at capacity; retry later")
		e.RetryAfter = s.retryAfter()
		return e
	case errors.Is(err, batch.ErrTooLarge):
		return server.Errorf(http.StatusUnprocessableEntity, "too_many_items", "request has more items than the queue holds")
	case errors.Is(err, batch.ErrClosed) && !s.draining.Load():
		// The scheduler refuses while the service is not draining: its
		// transport (a broker) is unreachable, or has no worker. It may
		// name its code and message.
		e := server.Errorf(http.StatusServiceUnavailable, "unavailable", "batch scheduler unavailable; retry later")
		var u interface{ Unavailable() (code, message string) }
		if errors.As(err, &u) {
			e.Code, e.Message = u.Unavailable()
		}
		e.RetryAfter = 1
		return e
	case errors.Is(err, batch.ErrClosed):
		return errDraining()
	case errors.Is(err, context.DeadlineExceeded):
		return server.Errorf(http.StatusGatewayTimeout, "deadline_exceeded", "request deadline passed before its result")
	case errors.Is(err, context.Canceled):
		return server.Errorf(server.StatusClientClosed, "client_closed", "client went away")
	case errors.As(err, &items):
		return server.Errorf(http.StatusInternalServerError, "model_error", "model failed: %v", items)
	default:
		return server.Errorf(http.StatusInternalServerError, "internal", "%v", err)
	}
}

func errDraining() *server.Error {
	e := server.Errorf(http.StatusServiceUnavailable, "draining", "server is shutting down")
	e.RetryAfter = 1
	return e
}

func errNotReady() *server.Error {
	e := server.Errorf(http.StatusServiceUnavailable, "not_ready", "model is loading")
	e.RetryAfter = 1
	return e
}

// retryAfter is how many seconds the batched backlog needs to clear, as the
// scheduler estimates it (at least 1, at most 60): the Retry-After of a 429.
func (s *Service) retryAfter() int {
	var d time.Duration
	if b, ok := s.scheduler().(interface{ Backlog() time.Duration }); ok {
		d = b.Backlog()
	}
	return max(1, min(60, int(math.Ceil(d.Seconds()))))
}
