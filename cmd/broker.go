package cmd

import (
	"github.com/inferhq/infer/models"
	"github.com/inferhq/infer/server/broker"
	"github.com/inferhq/infer/server/encoder"
)

// useBroker turns cfg's batched endpoint into a frontend of the broker at
// url, for the model of factory: requests go into its stream for infer
// worker processes, which must serve the same model. An empty url leaves cfg
// as it is.
func useBroker(cfg *encoder.Config, url string, factory models.Factory) error {
	if url == "" {
		return nil
	}
	fp, err := broker.Fingerprint(factory)
	if err != nil {
		return err
	}
	fe, err := broker.NewFrontend(broker.FrontendConfig{
		Config:      broker.Config{URL: url, Logger: cfg.Logger},
		QueueCap:    cfg.Batch.QueueCap,
		Fingerprint: fp,
	}, factory.Info())
	if err != nil {
		return usageErrorf("--broker: %v", err)
	}
	broker.LogClientTo(cfg.Logger)
	cfg.Scheduler = fe // its metrics go with it
	return nil
}
