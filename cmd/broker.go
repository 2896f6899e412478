package cmd

import (
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server"
	"github.com/inferhq/infer/server/broker"
)

// useBroker turns cfg's batched endpoint into a frontend of the broker at
// url, for the model described by info: requests go into its stream for
// infer worker processes. An empty url leaves cfg as it is.
func useBroker(cfg *server.Config, url string, info models.Info) error {
	if url == "" {
		return nil
	}
	fe, err := broker.NewFrontend(broker.FrontendConfig{
		Config:   broker.Config{URL: url, Logger: cfg.Logger},
		QueueCap: cfg.Batch.QueueCap,
	}, info)
	if err != nil {
		return usageErrorf("--broker: %v", err)
	}
	broker.LogClientTo(cfg.Logger)
	cfg.Scheduler = fe
	cfg.Collectors = append(cfg.Collectors, fe.Collectors()...)
	return nil
}
