package webhook

import (
	"fmt"
	"io"
)

// WriteMetrics writes the webhook metrics of docs/operations.md, in
// Prometheus's text format: the attempts this replica made and the
// deliveries it ended, by outcome, and the deliveries waiting in its copy.
func (hk *Hooks) WriteMetrics(w io.Writer) {
	fmt.Fprint(w, "# HELP deeplink_webhook_attempts_total Webhook delivery attempts by outcome: succeeded, failed (the last attempt of a delivery that failed), retried.\n# TYPE deeplink_webhook_attempts_total counter\n")
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"succeeded\"} %d\n", hk.Outcomes.Succeeded.Load())
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"failed\"} %d\n", hk.Outcomes.Failed.Load())
	fmt.Fprintf(w, "deeplink_webhook_attempts_total{outcome=\"retried\"} %d\n", hk.Outcomes.Retried.Load())
	fmt.Fprint(w, "# HELP deeplink_webhook_deliveries_total Webhook deliveries that ended, by outcome: succeeded, or failed (the retries used up, or given up when the endpoint was disabled or stopped taking the type).\n# TYPE deeplink_webhook_deliveries_total counter\n")
	fmt.Fprintf(w, "deeplink_webhook_deliveries_total{outcome=\"succeeded\"} %d\n", hk.Ended.Succeeded.Load())
	fmt.Fprintf(w, "deeplink_webhook_deliveries_total{outcome=\"failed\"} %d\n", hk.Ended.Failed.Load())
	fmt.Fprintf(w, "# HELP deeplink_webhook_queue_depth Webhook deliveries waiting to be sent or under way.\n# TYPE deeplink_webhook_queue_depth gauge\ndeeplink_webhook_queue_depth %d\n", hk.QueueDepth())
}
