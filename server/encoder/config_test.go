package encoder_test

import (
	"testing"

	"github.com/inferhq/infer/server/batch"
	"github.com/inferhq/infer/server/encoder"
)

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg     encoder.Config
		wantErr bool
	}{
		{encoder.Config{}, false},
		{encoder.Config{MaxItems: 100, Batch: batch.Config{QueueCap: 10}}, true},
		{encoder.Config{Batch: batch.Config{Policy: "never"}}, true},
		{encoder.Config{Workers: batch.WorkersLimit + 1}, true},
		{encoder.Config{MaxItems: -1}, true},
		{encoder.Config{CacheSize: encoder.CacheSizeLimit + 1}, true},
		{encoder.Config{CacheSize: encoder.CacheSizeLimit, CacheTTL: -1}, true},
	} {
		if err := tc.cfg.Validate(); (err != nil) != tc.wantErr {
			t.Errorf("%+v.Validate() = %v, want an error: %v", tc.cfg, err, tc.wantErr)
		}
	}
}
