package chaos

// semaphoreLimit is the number of permits per name of the semaphore
// scenarios: with four workers on two names, a name is often wanted by
// more workers than it admits.
const semaphoreLimit = 2
