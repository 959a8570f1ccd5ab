"""Signed commands from operators: the command channel on MQTT, what each command does, and the fleet
side that sends them."""
