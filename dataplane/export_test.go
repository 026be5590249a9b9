package dataplane

// SetTestHookSnapshot makes f run in every lane between its load of the SAD
// and the publication of the generation it holds; the returned function
// removes it.
func SetTestHookSnapshot(f func(d *Dataplane, lane string)) (restore func()) {
	testHookSnapshot.Store(&f)
	return func() { testHookSnapshot.Store(nil) }
}
