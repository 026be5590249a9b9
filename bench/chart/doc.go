// Package chart draws the charts of `sluice bench tunnel` and `sluice bench
// tls` from their JSON documents, as PNG and SVG, with gonum.org/v1/plot.
// It is linked only into the sluice-plot command (cmd/sluice-plot), so that
// the gateway's binary carries neither the plotting library nor its fonts;
// `sluice bench ... --plot DIR` writes the document into DIR and runs
// sluice-plot on it.
//
// Every chart follows the same rules: one colour per system in every chart
// (shades of it for a system's variants: engines, algorithms, workers);
// the legend beside the plot, never over the data; a logarithmic axis where
// the values span a decade or more; error bars from the smallest to the
// largest repetition; higher-is-better and lower-is-better figures on
// separate charts, and each title saying which it is; p50 and p99 apart.
package chart
