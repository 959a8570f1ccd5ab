"""MQTT: a thin typed connection over paho-mqtt 2.x, a durable spool, and the publisher between them."""
