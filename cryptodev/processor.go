package cryptodev

// Processor is a synchronous engine's per-goroutine worker: it runs ops in
// the calling goroutine and sets each op's Status, as a synchronous Queue
// does inside Submit. It holds whatever per-thread state the engine needs
// (scratch memory, a library's job manager), so it is used by one
// goroutine at a time; different Processors of one engine run at once.
type Processor interface {
	// Process runs every op in ops. It never fails as a whole: each op
	// gets its own Status. The ops' slices are borrowed for the call.
	Process(ops []Op)
	// Close releases the processor's state. It is idempotent.
	Close()
}

// ProcessorEngine is a synchronous engine whose work any goroutine can run
// through a Processor of its own. A scheduling engine (package sched) runs
// one per worker over the inner engine's keys, so that any synchronous
// engine's code is spread over all cores.
type ProcessorEngine interface {
	Engine
	// NewProcessor returns a Processor for one goroutine. Ops it runs
	// name keys this engine made.
	NewProcessor() (Processor, error)
}

// Describe says what runs behind e, for logs and benchmark tables: the
// engine's Describe method if it has one (a library's version and the code
// path it chose for this CPU), else its name.
func Describe(e Engine) string {
	if d, ok := e.(interface{ Describe() string }); ok {
		return d.Describe()
	}
	return e.Name()
}
