// Loaded with `node --require` before kinesis-local (floeline.dev.aws): kinesis-local has
// no setting for the address it listens on and binds every interface, so every TCP
// server of the process (its HTTP and HTTPS listeners) is made to listen on 127.0.0.1.
'use strict';

const net = require('net');

const LOOPBACK = '127.0.0.1';
const listen = net.Server.prototype.listen;

function isPort(value) {  // as Node reads listen()'s first argument: a number or digits
  return typeof value === 'number' || (typeof value === 'string' && /^[0-9]+$/.test(value));
}

function isTcpOptions(value) {  // listen({port, host, ...}), not a pipe path or a handle
  return value !== null && typeof value === 'object' &&
    !('path' in value) && !('fd' in value) && !('handle' in value) && !('_handle' in value);
}

net.Server.prototype.listen = function (...args) {
  const [first] = args;
  if (isTcpOptions(first)) {
    args[0] = { ...first, host: LOOPBACK };
  } else if (isPort(first)) {
    if (typeof args[1] === 'string') {
      args[1] = LOOPBACK;  // listen(port, host, ...)
    } else {
      args.splice(1, 0, LOOPBACK);  // listen(port[, backlog][, callback])
    }
  } else if (args.length === 0 || typeof first === 'function') {
    args.unshift(0, LOOPBACK);  // listen([callback]): any free port
  }
  return listen.apply(this, args);
};
