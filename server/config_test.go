package server_test

import (
	"testing"

	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/batch"
)

func TestConfigValidate(t *testing.T) {
	if err := (server.Config{MaxItems: 100, Batch: batch.Config{QueueCap: 10}}).Validate(); err == nil {
		t.Error("MaxItems > QueueCap accepted")
	}
	if err := (server.Config{Batch: batch.Config{Policy: "never"}}).Validate(); err == nil {
		t.Error("unknown policy accepted")
	}
	if err := (server.Config{}).Validate(); err != nil {
		t.Errorf("zero Config: %v", err)
	}
}
